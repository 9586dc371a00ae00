"""What the composed runs hand back: the data stages' references and the whole pipeline's results, typed.

The stage results themselves live beside their stages (``TrainResult``, ``CalibrationResult``, ``TestResult``; a
single artifact is an ``ArtifactRef``); these models gather them for the flows that chain stages, so no layer
reads a result by string key.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from rtscore.stages.calibrate import CalibrationResult
from rtscore.stages.evaluate_test import TestResult
from rtscore.stages.spec import ArtifactRef
from rtscore.stages.train import TrainResult


class DataResult(BaseModel):
    """The data stages of a run: the resolved config, each split's tile store, the stats, the validation."""

    config: ArtifactRef = Field(..., description="config.resolved.yaml: the config every stage of the run used.")
    datasets: dict[str, ArtifactRef] = Field(..., description="The tile store of each split, train, val, test.")
    normalization_stats: ArtifactRef = Field(..., description="Per-channel stats of the train split.")
    validation: ArtifactRef = Field(..., description="The data validation report (validation/).")

    def named(self) -> dict[str, ArtifactRef]:
        """Each reference under a name, in pipeline order: config, dataset_<split>, normalization_stats,
        validation (what `rts data` prints and the data-pipeline artifact links)."""
        return {
            "config": self.config,
            **{f"dataset_{split}": ref for split, ref in self.datasets.items()},
            "normalization_stats": self.normalization_stats,
            "validation": self.validation,
        }


class PipelineResult(BaseModel):
    """The whole pipeline of a run: data, training of every seed, calibration, test evaluation, package."""

    data: DataResult = Field(..., description="The data stages.")
    training: list[TrainResult] = Field(..., description="Every trained seed, in training order.")
    calibration: CalibrationResult = Field(..., description="The calibration decision and the shipped seed.")
    test: TestResult = Field(..., description="Test-Realistic, mean ± std over the seeds.")
    package: ArtifactRef = Field(..., description="The deployment package.")

    @property
    def trained_seeds(self) -> list[int]:
        return [r.result.seed for r in self.training]
