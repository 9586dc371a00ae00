"""PR-AUC of confident, saturated models (logits up to ±50) against scikit-learn on every pixel (issue 11, point 5).

The reference weights each pixel as the project defines the 1:N pool (`negative_weight`): pixels of positive
tiles weigh 1, pixels of negative tiles `N x n_pos / n_neg`. Two references: scikit-learn on float64
probabilities, as a user would compute it, on pools whose positives and negatives interleave only where float64
resolves sigmoid (logit < 30: above ~36.7, sigmoid rounds to exactly 1.0 and ties what the model ranks); and
on the logits themselves, which is the model's exact ranking, on pools whose hard negatives reach +50.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit
from sklearn.metrics import average_precision_score

from rtscore.config import ConfigError, parse_pipeline_config
from rtscore.metrics import TileHistogramAccumulator, TileHistograms, negative_weight, pr_auc
from tests.helpers import tiny_pipeline_config

RATIOS = (1.0, 200.0, 1000.0)
SEEDS = (0, 1, 2, 3)


def saturated_pool(
    seed: int, *, limit: float, hard_max: float, n_pos: int = 40, n_neg: int = 400, size: int = 32
) -> tuple[np.ndarray, np.ndarray]:
    """A confident model: slump pixels near +limit/2, background near -limit/2, both clipped to ±limit, and
    0.2 % hard negatives spread over the positives' range up to `hard_max` (the old ±16 end bin tied them all)."""
    rng = np.random.default_rng(seed)
    labels = np.zeros((n_pos + n_neg, size, size), np.uint8)
    for i in range(n_pos):
        r, c = rng.integers(0, size - 8, 2)
        labels[i, r : r + rng.integers(2, 8), c : c + rng.integers(2, 8)] = 1
    s = limit / 50.0
    logits = np.where(labels == 1, rng.normal(22 * s, 10 * s, labels.shape), rng.normal(-25 * s, 10 * s, labels.shape))
    hard = (rng.random(labels.shape) < 0.002) & (labels == 0)
    v = rng.normal(14 * s, 8 * s, int(hard.sum()))
    logits[hard] = np.where(v > hard_max, 2 * hard_max - v, v)  # folded below hard_max: no point mass at it
    return np.clip(logits, -limit, limit).astype(np.float32), labels


def histograms(logits: np.ndarray, labels: np.ndarray, batch: int = 32) -> TileHistograms:
    acc = TileHistogramAccumulator()
    for s in range(0, len(logits), batch):
        acc.add_batch(logits[s : s + batch], labels[s : s + batch], list(range(s, min(s + batch, len(logits)))))
    return acc.result()


def sklearn_ap(scores: np.ndarray, labels: np.ndarray, ratio: float) -> float:
    """scikit-learn's AP of every valid pixel, negative tiles re-weighted to 1:`ratio` as the project does."""
    is_pos = (labels == 1).reshape(len(labels), -1).any(axis=1)
    w_neg = negative_weight(ratio, int(is_pos.sum()), int((~is_pos).sum()))
    weight = np.broadcast_to(np.where(is_pos, 1.0, w_neg)[:, None, None], labels.shape)
    valid = labels != 255
    return float(average_precision_score(labels[valid] == 1, scores[valid], sample_weight=weight[valid]))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("limit", [30.0, 50.0])
def test_pr_auc_matches_sklearn_on_float64_probabilities(seed: int, limit: float) -> None:
    logits, labels = saturated_pool(seed, limit=limit, hard_max=0.6 * limit)
    h = histograms(logits, labels)
    prob = expit(logits.astype(np.float64))
    for r in RATIOS:
        ref = sklearn_ap(prob, labels, r)
        assert abs(pr_auc(h, r) - ref) <= 0.005, f"1:{r:g}: {pr_auc(h, r):.4f} vs sklearn {ref:.4f}"


@pytest.mark.parametrize("seed", SEEDS)
def test_pr_auc_matches_sklearn_on_the_logit_ranking_up_to_50(seed: int) -> None:
    logits, labels = saturated_pool(seed, limit=50.0, hard_max=50.0)
    h = histograms(logits, labels)
    for r in RATIOS:
        ref = sklearn_ap(logits.astype(np.float64), labels, r)
        assert abs(pr_auc(h, r) - ref) <= 0.005, f"1:{r:g}: {pr_auc(h, r):.4f} vs sklearn {ref:.4f}"


def test_histograms_merge_in_any_order() -> None:
    """Per-tile histograms are sums over fixed bins: batches, tile pieces and pools combine associatively."""
    logits, labels = saturated_pool(0, limit=50.0, hard_max=50.0, n_pos=6, n_neg=10)
    whole = histograms(logits, labels, batch=16)
    acc = TileHistogramAccumulator()
    order = np.random.default_rng(1).permutation(len(logits))
    for i in order:  # each tile in two halves, tiles in random order
        acc.add_batch(logits[i : i + 1, 16:], labels[i : i + 1, 16:], [int(i)])
    for i in order[::-1]:
        acc.add_batch(logits[i : i + 1, :16], labels[i : i + 1, :16], [int(i)])
    pieces = acc.result()
    back = np.argsort(np.asarray(pieces.tile_ids))
    np.testing.assert_array_equal(pieces.pos[back], whole.pos)
    np.testing.assert_array_equal(pieces.neg[back], whole.neg)


def test_an_odd_pr_bins_is_refused_at_config_load_naming_the_key() -> None:
    """Logit 0 must be a bin edge; an odd core used to fail only when the first validation pass began."""
    data = tiny_pipeline_config()
    data["metrics"] = {"pr_bins": 2047}
    with pytest.raises(ConfigError, match=r"metrics\.pr_bins: .*multiple of 2"):
        parse_pipeline_config(data)
