"""Inference with a deployment package: the deployment numerics (TTA, scales, fusion, temperature), sliding-window
prediction of GeoTIFFs to probability and mask COGs, and input drift against the package's statistics.

:mod:`~rtscore.inference.numerics` is the one forward path of calibration, test evaluation and prediction.
"""

from rtscore.inference.drift import DriftError, DriftReport, drift_report
from rtscore.inference.drift import render_markdown as render_drift_report
from rtscore.inference.numerics import predict_logits, prepare_model
from rtscore.inference.predict import (
    LoadedPackage,
    PredictError,
    PredictOutputs,
    input_rasters,
    load_package,
    predict_many,
    predict_raster,
)

__all__ = [
    "DriftError",
    "DriftReport",
    "LoadedPackage",
    "PredictError",
    "PredictOutputs",
    "drift_report",
    "input_rasters",
    "load_package",
    "predict_logits",
    "predict_many",
    "predict_raster",
    "prepare_model",
    "render_drift_report",
]
