from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize_scalar
from scipy.special import expit, log_expit

from rtscore.calibrate import ece_from_hist, fit_temperature, nll_from_hist
from rtscore.metrics import LogitBins, TileHistogramAccumulator, weighted_hist


def _overconfident_pool(k: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Labels drawn from sigmoid(z); the 'model' reports k * z (overconfident for k > 1)."""
    rng = np.random.default_rng(seed)
    z = rng.normal(-3.0, 2.0, (20, 32, 32))
    labels = (rng.random(z.shape) < 1 / (1 + np.exp(-z))).astype(np.uint8)
    return (k * z).astype(np.float32), labels


def _hist(logits: np.ndarray, labels: np.ndarray):  # type: ignore[no-untyped-def]
    acc = TileHistogramAccumulator(LogitBins())
    acc.add_batch(logits, labels, list(range(logits.shape[0])))
    return acc.result()


def test_recovers_the_overconfidence_factor() -> None:
    logits, labels = _overconfident_pool(2.0)
    fit = fit_temperature(_hist(logits, labels))
    assert fit.temperature == pytest.approx(2.0, rel=0.08)
    assert fit.nll_after < fit.nll_before and fit.ece_after < fit.ece_before


def test_histogram_nll_matches_pixel_nll_and_its_minimiser() -> None:
    logits, labels = _overconfident_pool(1.5, seed=1)
    h = _hist(logits, labels)
    pos, neg = weighted_hist(h, None)
    x, y = logits.astype(np.float64).ravel(), labels.ravel()

    def pixel_nll(t: float) -> float:
        z = x / t
        return float(-(y * log_expit(z) + (1 - y) * log_expit(-z)).mean())

    assert nll_from_hist(pos, neg, h.bins, 1.3) == pytest.approx(pixel_nll(1.3), rel=1e-3)
    ref = minimize_scalar(lambda lt: pixel_nll(float(np.exp(lt))), bounds=(-3, 3), method="bounded")
    assert fit_temperature(h).temperature == pytest.approx(float(np.exp(ref.x)), rel=0.01)


def test_ece_of_a_calibrated_model_is_small_and_of_an_overconfident_one_large() -> None:
    calibrated = _hist(*_overconfident_pool(1.0, seed=2))
    over = _hist(*_overconfident_pool(3.0, seed=2))
    pc, nc = weighted_hist(calibrated, None)
    po, no = weighted_hist(over, None)
    assert ece_from_hist(pc, nc, calibrated.bins) < 0.02 < ece_from_hist(po, no, over.bins)


def test_bad_input() -> None:
    h = _hist(*_overconfident_pool(1.0))
    pos, neg = weighted_hist(h, None)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        nll_from_hist(pos, neg, h.bins, 0.0)
    with pytest.raises(ValueError, match="bins but the binning has"):
        nll_from_hist(pos[:10], neg[:10], h.bins)


def _tempered_pool(t_true: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A model whose logits z are T times the calibrated ones: labels drawn from sigmoid(z / T).

    At T = 2 they reach about ±40, at T = 8 about ±150, far past the ±16 the histograms once clamped to.
    """
    rng = np.random.default_rng(seed)
    u = rng.normal(-3.0, 5.0, (24, 64, 64))  # calibrated logits
    labels = (rng.random(u.shape) < expit(u)).astype(np.uint8)
    return (t_true * u).astype(np.float32), labels


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("t_true", [0.5, 2.0, 8.0])
def test_recovers_the_true_temperature_for_any_logit_range(t_true: float, seed: int) -> None:
    logits, labels = _tempered_pool(t_true, seed)
    fit = fit_temperature(_hist(logits, labels))
    assert fit.temperature == pytest.approx(t_true, rel=0.05)
    assert fit.nll_after <= fit.nll_before
    # ... and within 1 % of the fit on every pixel's own logit (the bin-centre approximation costs that little).
    x, y = logits.astype(np.float64).ravel(), labels.ravel()

    def pixel_nll(log_t: float) -> float:
        z = x / np.exp(log_t)
        return float(-(y * log_expit(z) + (1 - y) * log_expit(-z)).mean())

    ref = minimize_scalar(pixel_nll, bounds=(np.log(0.05), np.log(20.0)), method="bounded", options={"xatol": 1e-4})
    assert fit.temperature == pytest.approx(float(np.exp(ref.x)), rel=0.01)
