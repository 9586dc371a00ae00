"""Test-Realistic evaluation with the frozen deployment config, per seed and as mean ± std (guide §10.4, §13).

The test set is run through exactly the deployment numerics (`calibrate.infer.predict_logits`, then
temperature and threshold from `deployment_config.yaml`), once per seed. Pixel counts at the threshold are
exact per tile (not binned), then re-weighted to each prevalence ratio like every validation metric.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.base import ConfigError, load_config
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.errors import PipelineError
from rtscore.metrics import (
    ConfusionCounts,
    LogitBins,
    ObjectCounter,
    TileHistogramAccumulator,
    TileHistograms,
    match_objects,
    negative_weight,
    object_metrics,
    pr_auc,
    ratio_tag,
    recall_by_size,
    weighted_hist,
)
from rtscore.metrics.objects import iou_tag
from rtscore.metrics.pixel import prob_to_logit

# Rows of the report, in the guide's order (§13.2), with their display names.
PIXEL_ROWS = (("iou_rts", "IoU_RTS"), ("f1_rts", "F1_RTS"), ("pr_auc", "PR-AUC"))


class EvaluationError(PipelineError):
    """Test evaluation cannot run (e.g. the deployment config is not frozen yet)."""


def frozen_deployment(path: Path) -> DeploymentConfig:
    """The calibrated deployment config; refuses while threshold or temperature is null."""
    if not path.is_file():
        raise EvaluationError(f"deployment config not found: {path}; run calibrate first")
    try:
        dep = load_config(DeploymentConfig, path)
    except ConfigError as err:
        raise EvaluationError(str(err)) from None
    missing = [name for name in ("threshold", "temperature") if getattr(dep, name) is None]
    if missing:
        raise EvaluationError(
            f"{path}: {' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} null; test evaluation uses the "
            "frozen deployment config only (guide §10.4 step 6): run calibrate first"
        )
    return dep


@dataclass
class SeedEvaluation:
    """Everything one seed's test pass leaves: calibrated-logit histograms, exact tile confusions, objects."""

    hist: TileHistograms
    tile_confusion: np.ndarray  # (T, 4) tp, fp, fn, tn at the operating threshold(s)
    is_positive: np.ndarray
    objects: ObjectCounter
    metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    recall_by_size: list[dict[str, float]] = field(default_factory=list)


def run_test_pass(
    model: Any, loader: Any, cfg: PipelineConfig, dep: DeploymentConfig, *, progress: bool = False
) -> SeedEvaluation:
    """One pass over the test loader with the frozen deployment numerics."""
    import torch

    from rtscore.calibrate.infer import predict_logits, prepare_model

    assert dep.threshold is not None and dep.temperature is not None
    m = cfg.metrics
    acc = TileHistogramAccumulator(LogitBins(n_bins=m.pr_bins))
    objects = ObjectCounter(m.object_iou_thresholds, threshold=dep.threshold, min_blob_size_px=m.min_blob_size_px)
    run_model = prepare_model(model, dep.torch_compile)
    device = next(model.parameters()).device
    confusion: list[np.ndarray] = []
    it = loader
    if progress:
        from tqdm import tqdm

        it = tqdm(loader, desc="test evaluation")
    with torch.inference_mode():
        for batch in it:
            x = batch["image"].to(device)
            z = predict_logits(
                run_model, x, tta=dep.tta, scales=dep.scales, fusion=dep.fusion, precision=dep.precision
            ) / float(dep.temperature)
            z_np = z.float().cpu().numpy()
            y = batch["label"].numpy()
            acc.add_batch(z_np, y, list(batch["tile_id"]))
            for i, region in enumerate(batch["region"]):
                thr = dep.region_thresholds.get(str(region), dep.threshold)
                called = z_np[i] >= prob_to_logit(thr)
                pos, neg = y[i] == 1, y[i] == 0
                tp, fp = int((called & pos).sum()), int((called & neg).sum())
                confusion.append(np.array([tp, fp, int(pos.sum()) - tp, int(neg.sum()) - fp], np.int64))
                objects.add(
                    match_objects(
                        z_np[i],
                        y[i],
                        threshold=thr,
                        iou_thresholds=m.object_iou_thresholds,
                        min_blob_size_px=m.min_blob_size_px,
                    )
                )
    hist = acc.result()
    return SeedEvaluation(hist, np.stack(confusion), hist.is_positive, objects)


def pixel_confusion_at_ratio(ev: SeedEvaluation, ratio: float) -> ConfusionCounts:
    """Exact pixel counts at the operating threshold, negative tiles re-weighted to 1:`ratio`."""
    w = negative_weight(ratio, int(ev.is_positive.sum()), int((~ev.is_positive).sum()))
    weights = np.where(ev.is_positive, 1.0, w)
    tp, fp, fn, tn = (weights[:, None] * ev.tile_confusion).sum(axis=0)
    return ConfusionCounts(tp=float(tp), fp=float(fp), fn=float(fn), tn=float(tn))


def summarize_seed(ev: SeedEvaluation, cfg: PipelineConfig, pixel_size_m: float) -> SeedEvaluation:
    """Fill `ev.metrics` (per ratio tag) and `ev.recall_by_size`."""
    for r in cfg.metrics.ratios:
        c = pixel_confusion_at_ratio(ev, r)
        pos, neg = weighted_hist(ev.hist, r)
        row: dict[str, float] = {
            "iou_rts": c.iou,
            "f1_rts": c.f1,
            "pr_auc": pr_auc(ev.hist, r),
            "precision": c.precision,
            "recall": c.recall,
            "no_skill_pr_auc": float(pos.sum() / (pos.sum() + neg.sum())),
        }
        for thr, s in object_metrics(ev.objects, r).items():
            row[f"object_precision_{iou_tag(thr)}"] = s.precision
            row[f"object_recall_{iou_tag(thr)}"] = s.recall
            row[f"object_f1_{iou_tag(thr)}"] = s.f1
        ev.metrics[ratio_tag(r)] = row
    edges_m2 = np.asarray(cfg.evaluation.size_bins_m2, np.float64)
    iou = 0.3 if 0.3 in ev.objects.iou_thresholds else ev.objects.iou_thresholds[0]
    n, recall = recall_by_size(ev.objects, edges_m2 / pixel_size_m**2, iou)
    ev.recall_by_size = [
        {"area_m2_from": float(lo), "area_m2_to": float(hi), "n_objects": int(k), "recall": float(rc), "iou": iou}
        for lo, hi, k, rc in zip(edges_m2[:-1], edges_m2[1:], n, recall, strict=True)
    ]
    return ev


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for one seed); nan values are left out."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def fmt(mean: float, std: float) -> str:
    """The guide's format: `0.723 ± 0.012`."""
    if math.isnan(mean):
        return "n/a"
    return f"{mean:.3f} ± {std:.3f}"


def aggregate(per_seed: Mapping[int, Mapping[str, Mapping[str, float]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per ratio tag and metric: mean, std and the formatted string across seeds."""
    seeds = list(per_seed)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for tag in per_seed[seeds[0]]:
        out[tag] = {}
        for name in per_seed[seeds[0]][tag]:
            mu, sd = mean_std([per_seed[s][tag][name] for s in seeds])
            out[tag][name] = {"mean": mu, "std": sd, "text": fmt(mu, sd)}
    return out


def render_markdown(report: Mapping[str, Any]) -> str:
    """`test_report.md`: the guide's results table (mean ± std over seeds), per-seed rows, recall by size."""
    agg = report["aggregate"]
    tags = list(agg)
    head = "| Metric | " + " | ".join(t.replace("1_", "1:") for t in tags) + " |"
    sep = "|---|" + "---|" * len(tags)
    names = list(PIXEL_ROWS)
    for thr in report["object_iou_thresholds"]:
        tg = iou_tag(thr)
        names += [
            (f"object_precision_{tg}", f"Object precision @IoU {thr:g}"),
            (f"object_recall_{tg}", f"Object recall @IoU {thr:g}"),
            (f"object_f1_{tg}", f"Object F1 @IoU {thr:g}"),
        ]
    names.append(("no_skill_pr_auc", "PR-AUC of no skill"))
    lines = [
        f"# Test-Realistic report ({len(report['seeds'])} seeds: {', '.join(map(str, report['seeds']))})",
        "",
        f"Frozen deployment config per seed (tta {report['tta']}, scales {report['scales']}); mean ± std over seeds.",
        "",
        head,
        sep,
    ]
    for key, label in names:
        lines.append(f"| {label} | " + " | ".join(agg[t][key]["text"] for t in tags) + " |")
    lines += ["", "## Per seed", "", "| seed | threshold | T | " + " | ".join(f"PR-AUC {t}" for t in tags) + " |"]
    lines.append("|---|---|---|" + "---|" * len(tags))
    for s in report["per_seed"]:
        row = [f"{s['metrics'][t]['pr_auc']:.3f}" for t in tags]
        lines.append(f"| {s['seed']} | {s['threshold']:.4f} | {s['temperature']:.3f} | " + " | ".join(row) + " |")
    lines += [
        "",
        "## Object recall by RTS area (mean over seeds)",
        "",
        "| area (m²) | GT objects | recall |",
        "|---|---|---|",
    ]
    first = report["per_seed"][0]["recall_by_size"]
    for i, b in enumerate(first):
        mu, sd = mean_std([s["recall_by_size"][i]["recall"] for s in report["per_seed"]])
        n = sum(s["recall_by_size"][i]["n_objects"] for s in report["per_seed"]) // len(report["per_seed"])
        hi = "∞" if b["area_m2_to"] >= 1e11 else f"{b['area_m2_to']:,.0f}"
        lines.append(f"| {b['area_m2_from']:,.0f} – {hi} | {n} | {fmt(mu, sd)} |")
    return "\n".join(lines) + "\n"


def render_table(report: Mapping[str, Any]) -> str:
    """A compact terminal table of the aggregate (PR-AUC, IoU, F1, object F1 @0.3)."""
    agg = report["aggregate"]
    tags = list(agg)
    rows = [("PR-AUC", "pr_auc"), ("IoU_RTS", "iou_rts"), ("F1_RTS", "f1_rts"), ("no-skill PR-AUC", "no_skill_pr_auc")]
    if 0.3 in report["object_iou_thresholds"]:
        rows += [("Object P @0.3", "object_precision_iou30"), ("Object R @0.3", "object_recall_iou30")]
        rows += [("Object F1 @0.3", "object_f1_iou30")]
    width = 17
    out = [f"{'Test-Realistic':<{width}}" + "".join(f"{t.replace('1_', '1:'):>17}" for t in tags)]
    for label, key in rows:
        out.append(f"{label:<{width}}" + "".join(f"{agg[t][key]['text']:>17}" for t in tags))
    return "\n".join(out)
