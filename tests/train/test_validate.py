"""Training validation of a confident, saturated model: the early-stopping PR-AUC is the pixel-exact one."""

from __future__ import annotations

import numpy as np
import torch

from rtscore.config import parse_pipeline_config
from rtscore.train.validate import collect, metric_names, summarize
from tests.helpers import tiny_pipeline_config
from tests.metrics.test_saturated import saturated_pool, sklearn_ap


class _LogitsAsImages(torch.nn.Module):
    """A 'model' whose output is its input: the loader's images are the logits under test."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_validation_pr_auc_and_geomean_match_sklearn_for_logits_up_to_50() -> None:
    data = tiny_pipeline_config()
    data["metrics"] = {"ratios": [200, 1000], "bootstrap_samples": 0}
    cfg = parse_pipeline_config(data)
    logits, labels = saturated_pool(5, limit=50.0, hard_max=50.0)
    logits[40, 0, :2] = [700.0, -1e6]  # two diverged pixels of a negative tile: tied in the overflow bins
    loader = [
        {
            "image": torch.from_numpy(logits[s : s + 16, None]),
            "label": torch.from_numpy(labels[s : s + 16]),
            "tile_id": [f"t{i}" for i in range(s, min(s + 16, len(logits)))],
            "pixel_area_m2": torch.full((len(logits[s : s + 16]),), 4.77**2, dtype=torch.float64),
        }
        for s in range(0, len(logits), 16)
    ]
    out = summarize(collect(_LogitsAsImages(), loader, cfg, torch.device("cpu")), cfg)
    ref = {r: sklearn_ap(logits.astype(np.float64), labels, r) for r in (1, 200, 1000)}
    assert abs(out["val_balanced_pr_auc"] - ref[1]) <= 0.005
    assert abs(out["val_realistic_pr_auc_1_200"] - ref[200]) <= 0.005
    assert abs(out["val_realistic_pr_auc_1_1000"] - ref[1000]) <= 0.005
    geomean = float(np.sqrt(ref[200] * ref[1000]))
    assert abs(out["val_realistic_pr_auc_geomean"] - geomean) <= 0.005
    assert out["val_logit_overflow_fraction"] == 2 / int((labels != 255).sum())
    assert metric_names(cfg) == sorted(out), "the names a sweep's metric is checked against are summarize's"
