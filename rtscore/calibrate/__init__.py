"""Post-training calibration on cached logit statistics: temperature (guide §12.1); gates and thresholds follow."""

from rtscore.calibrate.temperature import TemperatureFit, ece_from_hist, fit_temperature, nll_from_hist

__all__ = ["TemperatureFit", "ece_from_hist", "fit_temperature", "nll_from_hist"]
