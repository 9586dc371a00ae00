"""What every pipeline stage shares: artifact references, the stage list, and the code and config hashes that
key the orchestration layer's cache. Imported by `rtscore.stages` and `rtscore.post_training`."""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.storage import RunDir
from rtscore.train.result import SeedResult

BEST = "best_deployment.pth"  # training's inference checkpoint (guide §4.3); rtscore.train.checkpoint.BEST

# Modules whose code decides each stage's output (part of the cache key of the orchestration layer).
STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "generate-dataset": (
        "data/synthetic",
        "data/store.py",
        "data/generate.py",
        "data/tiles.py",
        "data/geotiff.py",
    ),
    "normalization-stats": ("data/normalization.py", "data/store.py"),
    "train-seed": (
        "train/loop.py",
        "train/data.py",
        "train/validate.py",
        "train/ema.py",
        "train/schedule.py",
        "train/early_stopping.py",
        "data/sampler.py",
        "data/transforms.py",
        "models.py",
        "losses/_functional.py",
        "metrics/prauc.py",
    ),
    "logit-cache": (
        "post_training.py",
        "calibrate/cache.py",
        "calibrate/infer.py",
        "metrics/histograms.py",
        "data/dataset.py",
        "data/transforms.py",
        "models.py",
    ),
    "calibrate": (
        "post_training.py",
        "calibrate/run.py",
        "calibrate/decisions.py",
        "calibrate/temperature.py",
        "calibrate/cache.py",
        "calibrate/plots.py",
        "metrics/prauc.py",
    ),
    "evaluate-test": (
        "post_training.py",
        "evaluate.py",
        "calibrate/infer.py",
        "metrics/objects.py",
        "metrics/prauc.py",
        "models.py",
    ),
    "package": ("post_training.py", "package.py"),
    "validate-data": (
        "data/validation.py",
        "data/dataset.py",
        "data/transforms.py",
        "data/sample_grid.py",
        "data/normalization.py",
        "data/store.py",
    ),
}


# Config sections a stage's output does not depend on: left out of its cache key, so that changing, say, the
# target precision re-runs calibration and what follows, never training or the data stages.
_LATER = ("calibration", "evaluation", "package")
_TRAINING = ("training", "optimizer", "lr_schedule", "ema", "model", "loss", "metrics")
STAGE_CONFIG_EXCLUDES: dict[str, tuple[str, ...]] = {
    "generate-dataset": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "normalization-stats": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "validate-data": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "train-seed": ("mlflow", "deployment", *_LATER),
    "logit-cache": (
        "mlflow",
        "evaluation",
        "package",
        # decision settings: the cache serves every value of these
        "calibration.ratio",
        "calibration.target_precision",
        "calibration.tta_gate",
        "calibration.tta_min_pr_auc_gain",
        "calibration.tta_max_precision_drop",
        "calibration.scale_gate",
        "calibration.scale_min_large_pr_auc_gain",
        "calibration.scale_max_fp_rate_increase",
        "calibration.per_region_thresholds",
        "calibration.temperature_bounds",
        "calibration.ece_bins",
        "deployment.threshold",
        "deployment.temperature",
        "deployment.tta",
        "deployment.scales",
        "deployment.fusion",
        "deployment.region_thresholds",
    ),
    "calibrate": ("mlflow", "evaluation", "package"),
    "evaluate-test": ("mlflow", "package"),
    "package": ("mlflow",),
}


# Pipeline stages from first to last (for reports and tests of what a config change re-runs).
STAGES = (
    "generate-dataset",
    "normalization-stats",
    "validate-data",
    "train-seed",
    "logit-cache",
    "calibrate",
    "evaluate-test",
    "package",
)


def stage_config_hash(stage: str, cfg: PipelineConfig) -> str:
    """sha256 of the config `stage` depends on: the whole config minus STAGE_CONFIG_EXCLUDES (sections or
    `section.field` keys)."""
    from rtscore.config.base import canonical_json

    data = cfg.model_dump(mode="json")
    for key in STAGE_CONFIG_EXCLUDES.get(stage, ()):
        section, _, name = key.partition(".")
        if name:
            data.get(section, {}).pop(name, None)
        else:
            data.pop(section, None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


class ArtifactRef(BaseModel):
    """What a stage hands to the next: where its artifact is and its content fingerprint."""

    uri: str = Field(..., description="Local path or URI of the artifact.")
    path: str = Field(..., description="Path relative to the run directory.")
    sha256: str = Field(..., description="Content fingerprint (see storage.fingerprint).")
    bytes: int = Field(..., description="Size in bytes.")
    stage: str = Field(..., description="Producing stage.")


class TrainResult(BaseModel):
    """A trained seed: its summary and the artifacts recorded in the manifest."""

    result: SeedResult = Field(..., description="Best metric, epochs, MLflow run of the seed.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded seed artifacts.")


def stage_code_hash(stage: str) -> str:
    """sha256 of the source files that implement a stage."""
    root = Path(__file__).parent
    h = hashlib.sha256(stage.encode())
    for rel in STAGE_MODULES[stage]:
        path = root / rel
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f.read_bytes())
    return h.hexdigest()


def _ref(run: RunDir, rel: str, stage: str, chash: str) -> ArtifactRef:
    e = run.record(rel, stage, chash)
    uri = e.uri if run.remote else str(run.path(rel))  # a gs:// run hands on gs:// URIs
    return ArtifactRef(uri=uri, path=rel, sha256=e.sha256, bytes=e.bytes, stage=stage)
