"""One inference pass over a validation pool, reduced to every metric of guide §6 and §10.3."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.metrics import (
    LogitBins,
    ObjectCounter,
    TileHistogramAccumulator,
    TileHistograms,
    bootstrap_pr_auc,
    object_metrics_at_ratios,
    pixel_metrics_at_ratios,
    pr_auc_at_ratios,
    ratio_tag,
    weighted_hist,
)
from rtscore.runtime import forward_logits


@dataclass
class PoolStats:
    """Everything later reductions need from one pass; memory grows with tiles x bins, not pixels."""

    hist: TileHistograms
    objects: ObjectCounter
    loss: float
    loss_batches: int = 0  # batches the loss is the mean of (merging shards weighs by them)


@torch.inference_mode()
def collect(
    model: torch.nn.Module,
    loader: Any,
    cfg: PipelineConfig,
    device: torch.device,
    *,
    loss_fn: torch.nn.Module | None = None,
) -> PoolStats:
    """Run the model once over the pool at the training precision; keep per-tile histograms and object counts."""
    m = cfg.metrics
    acc = TileHistogramAccumulator(LogitBins(core_bins=m.pr_bins))
    objects = ObjectCounter.for_metrics(m, m.reporting_threshold)
    was_training = model.training
    model.eval()
    loss_sum, n = 0.0, 0
    try:
        for batch in loader:
            x = batch["image"].to(device, non_blocking=True)
            y = batch["label"].to(device, non_blocking=True)
            logits = forward_logits(
                model, x, precision=cfg.training.precision, channels_last=cfg.training.channels_last
            )
            if loss_fn is not None:
                loss_sum += float(loss_fn(logits, y))
                n += 1
            acc.add_batch(logits, y, list(batch["tile_id"]))
            objects.add_batch(logits, y, batch["pixel_area_m2"])  # each tile's ground pixel: the minimum area
    finally:
        model.train(was_training)
    return PoolStats(acc.result(), objects, loss_sum / n if n else math.nan, n)


def merge_pools(parts: list[PoolStats]) -> PoolStats:
    """Shards of one pool (the ranks' contiguous shares, in rank order) as the pool: per-tile histograms
    concatenated, object counts summed, the loss the mean over every shard's batches. Exact: a histogram is
    per tile, so the merged pool is the one-process pool tile for tile. One part is returned as it is."""
    if len(parts) == 1:
        return parts[0]
    h = [p.hist for p in parts]
    hist = TileHistograms(
        bins=h[0].bins,
        pos=np.concatenate([x.pos for x in h]),
        neg=np.concatenate([x.neg for x in h]),
        tile_ids=tuple(t for x in h for t in x.tile_ids),
        is_positive=np.concatenate([x.is_positive for x in h]),
        n_valid=np.concatenate([x.n_valid for x in h]),
    )
    objects = parts[0].objects
    for p in parts[1:]:
        objects.merge(p.objects)
    n = sum(p.loss_batches for p in parts)
    loss = sum(p.loss * p.loss_batches for p in parts if p.loss_batches) / n if n else math.nan
    return PoolStats(hist, objects, loss, n)


def summarize(pool: PoolStats, cfg: PipelineConfig, *, prefix: str = "val", seed: int = 0) -> dict[str, float]:
    """PR-AUC (1:1 and each 1:N, geomean), bootstrap intervals, pixel IoU/F1 at 0.5, object P/R/F1.

    Also `<prefix>_logit_overflow_fraction`: the share of valid pixels whose logit is beyond ±512
    (`LogitBins.top`), which the histograms can only tie with one another; above 0 the model's logits diverge.
    """
    m = cfg.metrics
    out: dict[str, float] = {f"{prefix}_loss": pool.loss}
    n_valid = int(pool.hist.n_valid.sum())
    out[f"{prefix}_logit_overflow_fraction"] = pool.hist.n_overflow / n_valid if n_valid else math.nan
    out.update(pr_auc_at_ratios(pool.hist, m.ratios, prefix=prefix))
    out.update(pixel_metrics_at_ratios(pool.hist, m.ratios, threshold=m.reporting_threshold, prefix=prefix))
    out.update(object_metrics_at_ratios(pool.objects, m.ratios, prefix=prefix))
    for r in m.ratios:  # the PR-AUC of a no-skill model equals the (re-weighted) pixel prevalence
        pos, neg = weighted_hist(pool.hist, r)
        total = float(pos.sum() + neg.sum())
        out[f"{prefix}_realistic_no_skill_{ratio_tag(r)}"] = float(pos.sum()) / total if total else math.nan
    if m.bootstrap_samples > 0 and pool.hist.n_pos_tiles > 0:
        for r in m.ratios:
            lo, hi, std = bootstrap_pr_auc(pool.hist, r, m.bootstrap_samples, seed)
            tag = ratio_tag(r)
            out[f"{prefix}_realistic_pr_auc_{tag}_ci_low"] = lo
            out[f"{prefix}_realistic_pr_auc_{tag}_ci_high"] = hi
            out[f"{prefix}_realistic_pr_auc_{tag}_boot_std"] = std
    return out


def metric_names(cfg: PipelineConfig, *, prefix: str = "val") -> list[str]:
    """The keys :func:`summarize` gives under ``cfg`` (its ratios, IoU thresholds, bootstrap), sorted: read off a
    two-tile pool (a positive pixel, a negative tile) with at most one bootstrap resample, so that a metric's name
    is checked before any training against summarize's own keys, which can never drift from them."""
    m = cfg.metrics
    acc = TileHistogramAccumulator(LogitBins(core_bins=m.pr_bins))
    objects = ObjectCounter.for_metrics(m, m.reporting_threshold)
    logits = np.zeros((2, 2, 2), np.float32)
    target = np.zeros((2, 2, 2), np.uint8)
    target[0, 0, 0] = 1  # tile 0 positive, tile 1 negative
    acc.add_batch(logits, target, [0, 1])
    objects.add_batch(logits, target, [1.0, 1.0])
    quick = cfg.model_copy(update={"metrics": m.model_copy(update={"bootstrap_samples": min(m.bootstrap_samples, 1)})})
    return sorted(summarize(PoolStats(acc.result(), objects, 0.0, 1), quick, prefix=prefix))


def evaluate(
    model: torch.nn.Module,
    loader: Any,
    cfg: PipelineConfig,
    device: torch.device,
    *,
    loss_fn: torch.nn.Module | None = None,
    seed: int = 0,
    prefix: str = "val",
) -> dict[str, float]:
    return summarize(collect(model, loader, cfg, device, loss_fn=loss_fn), cfg, prefix=prefix, seed=seed)
