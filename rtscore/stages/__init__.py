"""The pipeline's stages over a run directory, each declared once as a :class:`StageSpec`.

Each stage module holds one stage function and its spec; ``registry.STAGES`` lists them in pipeline order
and derives their code fingerprints and cache keys. A stage requires its declared inputs, writes its
artifacts atomically and records each declared output in the run's manifest, last.
"""

from rtscore.stages.calibrate import (
    CalibrationResult,
    CalibrationSummary,
    SeedCalibration,
    calibrate,
    calibrated_seeds,
    choose_shipped_seed,
    read_calibration_summary,
)
from rtscore.stages.evaluate_test import TestResult, evaluate_test, recorded_test_result
from rtscore.stages.generate import generate_dataset, save_resolved_config
from rtscore.stages.logit_cache import logit_cache, recorded_logit_caches
from rtscore.stages.multi_seed import finish_multiseed, start_multiseed
from rtscore.stages.normalization import normalization_stats
from rtscore.stages.package import package
from rtscore.stages.registry import BY_NAME, STAGES, SUMMARIES, cache_key, code_fingerprint, producers
from rtscore.stages.results import DataResult, PipelineResult
from rtscore.stages.seeds import check_seed_model, trained_seeds
from rtscore.stages.spec import ArtifactRef, StageSpec, code_closure, recorded
from rtscore.stages.train import TrainResult, recorded_train_result, train_seed
from rtscore.stages.validate import validate_data

__all__ = [
    "BY_NAME",
    "STAGES",
    "SUMMARIES",
    "ArtifactRef",
    "CalibrationResult",
    "CalibrationSummary",
    "DataResult",
    "PipelineResult",
    "SeedCalibration",
    "StageSpec",
    "TestResult",
    "TrainResult",
    "cache_key",
    "calibrate",
    "calibrated_seeds",
    "check_seed_model",
    "choose_shipped_seed",
    "code_closure",
    "code_fingerprint",
    "evaluate_test",
    "finish_multiseed",
    "generate_dataset",
    "logit_cache",
    "normalization_stats",
    "package",
    "producers",
    "read_calibration_summary",
    "recorded",
    "recorded_logit_caches",
    "recorded_test_result",
    "recorded_train_result",
    "save_resolved_config",
    "start_multiseed",
    "train_seed",
    "trained_seeds",
    "validate_data",
]
