"""Calibration as the guide orders it (§10.4): gates -> deployment_config.yaml -> parity -> temperature, threshold.

`run_gates` decides TTA, then scales/fusion with the chosen TTA, from the caches of all seeds, and writes
them into `deployment_config.yaml`. `calibrate_seed` then reads that file back, refuses to go on if its
numerics differ from the ones the cache was computed with (guide §4.6), fits the temperature and the
thresholds on exactly that configuration, and writes `threshold` and `temperature` back into the same file.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import expit

from rtscore.calibrate.cache import CachedHist, Combo, LogitCache
from rtscore.calibrate.decisions import (
    GateDecision,
    region_thresholds,
    scale_gate,
    thresholds_at_ratios,
    tta_gate,
)
from rtscore.calibrate.temperature import fit_temperature
from rtscore.config.base import ConfigError, dump_yaml, load_config
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.errors import PipelineError
from rtscore.metrics import ObjectCounter, object_metrics, weighted_hist
from rtscore.metrics.objects import iou_tag


class CalibrationError(PipelineError):
    """Calibration cannot run: missing inputs, or a deployment config it must not calibrate."""


class ParityError(CalibrationError):
    """deployment_config.yaml asks for other numerics than the ones calibration measured (guide §4.6)."""


def read_deployment(path: Path) -> DeploymentConfig:
    if not path.is_file():
        raise CalibrationError(f"deployment config not found: {path}")
    try:
        return load_config(DeploymentConfig, path)
    except ConfigError as err:
        raise CalibrationError(str(err)) from None


def check_parity(dep: DeploymentConfig, cache: LogitCache, source: Path) -> Combo:
    """The configuration `dep` names, if the cache measured it with the same numerics; else ParityError.

    Compared: precision and torch_compile (as the cache's inference ran), TTA, scales and fusion (which cached
    configuration the fit would read).
    """
    a = cache.attrs
    problems = []
    if dep.precision != a["precision"]:
        problems.append(f"precision: {dep.precision!r} in the file, {a['precision']!r} in the logit cache")
    if dep.torch_compile != a["torch_compile"]:
        problems.append(f"torch_compile: {dep.torch_compile} in the file, {a['torch_compile']} in the logit cache")
    if dep.tta not in a["tta_candidates"]:
        problems.append(f"tta: {dep.tta!r} in the file, the logit cache measured {a['tta_candidates']}")
    combo = Combo.of(dep)
    if dep.tta in a["tta_candidates"] and combo.key not in cache.keys:
        problems.append(
            f"scales/fusion: {dep.scales} / {dep.fusion!r} in the file, the logit cache measured scales "
            f"{a['scale_candidates']} with fusions {a['fusion_candidates']}"
        )
    if problems:
        raise ParityError(
            f"calibration refuses to run: {source} differs from the numerics it would calibrate "
            f"(guide §4.6; the logit cache is {cache.path}):\n  - "
            + "\n  - ".join(problems)
            + "\nhint: fix the deployment config, or recompute the logit cache with these numerics"
        )
    return combo


def _fusion_name(c: Combo) -> str:
    return c.fusion if len(c.scales) > 1 else "1.0"


def run_gates(cfg: PipelineConfig, caches: list[LogitCache]) -> tuple[DeploymentConfig, dict[str, Any]]:
    """TTA gate, then scale gate with the chosen TTA, over all seeds' caches; the gated deployment config.

    Threshold and temperature come back null: they are fitted afterwards on the configuration chosen here.
    """
    cal, dep = cfg.calibration, cfg.deployment
    if not caches:
        raise CalibrationError("no logit cache to decide on; run the logit-cache stage for at least one seed")
    gates: dict[str, Any] = {"ratio": cal.ratio, "target_precision": cal.target_precision}
    tta = dep.tta
    if cal.tta_gate:
        per_seed = [{t: c.hist(Combo(t, (1.0,))) for t in cal.tta_candidates} for c in caches]
        decision = tta_gate(per_seed, cal)
        tta = decision.chosen
        gates["tta"] = decision.to_json()
    else:
        gates["tta"] = {"gate": "tta", "chosen": tta, "reason": "calibration.tta_gate is false: deployment.tta kept"}
    scales, fusion = list(dep.scales), dep.fusion
    if cal.scale_gate and len(cal.scale_candidates) > 1:
        multi = [Combo(tta, tuple(cal.scale_candidates), f) for f in cal.fusion_candidates]
        per_seed_scale: list[dict[str, CachedHist]] = [
            {"1.0": c.hist(Combo(tta, (1.0,))), **{_fusion_name(m): c.hist(m) for m in multi}} for c in caches
        ]
        sd: GateDecision = scale_gate(per_seed_scale, "1.0", cal)
        if sd.chosen == "1.0":
            scales, fusion = [1.0], dep.fusion
        else:
            scales, fusion = list(cal.scale_candidates), sd.chosen  # type: ignore[assignment]
        gates["scales"] = sd.to_json()
    else:
        gates["scales"] = {"gate": "scales", "chosen": scales, "reason": "scale gate off or one candidate scale"}
    update = {"tta": tta, "scales": scales, "fusion": fusion, "threshold": None, "temperature": None}
    gated = DeploymentConfig.model_validate(dep.model_copy(update=update).model_dump())
    return gated, gates


def _val_objects(
    cache: LogitCache, combo: Combo, cfg: PipelineConfig, temperature: float, threshold: float
) -> dict[str, Any]:
    """Object P/R/F1 on the validation pool at the operating threshold, from the full-resolution part."""
    m = cfg.metrics
    counter = ObjectCounter(m.object_iou_thresholds, threshold=threshold, min_blob_size_px=m.min_blob_size_px)
    kept = np.zeros(cache.n_tiles, bool)
    for row, z, label in cache.dense_tiles(combo):
        counter.add_batch((z / temperature)[None], label[None])
        kept[row] = True
    # Tiles not kept hold no GT object and no pixel above the floor: no object at thresholds above it.
    for row in np.flatnonzero(~kept):
        counter.n_pos_tiles += int(cache.is_positive[row])
        counter.n_neg_tiles += int(not cache.is_positive[row])
    raw_threshold = float(expit(temperature * math.log(threshold / (1 - threshold))))
    out: dict[str, Any] = {
        "exact": raw_threshold >= float(cache.attrs["object_prob_floor"]),
        "tiles_at_full_resolution": int(kept.sum()),
    }
    for r in m.ratios:
        for thr, s in object_metrics(counter, r).items():
            out[f"object_precision_{iou_tag(thr)}_1_{r}"] = s.precision
            out[f"object_recall_{iou_tag(thr)}_1_{r}"] = s.recall
            out[f"object_f1_{iou_tag(thr)}_1_{r}"] = s.f1
    return out


def calibrate_seed(dep_path: Path, cache: LogitCache, cfg: PipelineConfig, out_dir: Path) -> dict[str, Any]:
    """Temperature and threshold for one seed on the configuration `dep_path` names; written back into it.

    Returns:
        The calibration report (also the content of `calibration_report.json`).
    """
    from rtscore.calibrate.plots import plot_pr_curves, plot_reliability

    cal = cfg.calibration
    dep = read_deployment(dep_path)
    combo = check_parity(dep, cache, dep_path)
    ch = cache.hist(combo)
    if ch.hist.n_pos_tiles == 0:
        raise CalibrationError(f"the validation pool in {cache.path} has no positive tile: nothing to calibrate on")
    fit = fit_temperature(ch.hist, cal.ratio, bounds=cal.temperature_bounds)
    t = fit.temperature
    ratios = sorted({*cfg.metrics.ratios, cal.ratio})
    per_ratio = thresholds_at_ratios(ch.hist, ratios, cal.target_precision, t)
    operating = next(rt for rt in per_ratio if rt.ratio == cal.ratio)
    regions: dict[str, Any] = {}
    region_map: dict[str, float] = {}
    if cal.per_region_thresholds:
        for name, rt in region_thresholds(ch, cal.ratio, cal.target_precision, t).items():
            regions[name] = None if rt is None else rt.__dict__
            if rt is not None:
                region_map[name] = rt.threshold
    updated = dep.model_copy(
        update={"threshold": operating.threshold, "temperature": t, "region_thresholds": region_map}
    )
    dump_yaml(DeploymentConfig.model_validate(updated.model_dump()), dep_path)
    out_dir.mkdir(parents=True, exist_ok=True)
    pos, neg = weighted_hist(ch.hist, cal.ratio)
    plot_reliability(
        pos, neg, cache.bins, t, cal.ece_bins, out_dir / "reliability.png", f"Val-Realistic 1:{cal.ratio}, {combo.key}"
    )
    plot_pr_curves(
        {f"1:{r}": (*weighted_hist(ch.hist, r), cache.bins) for r in cfg.metrics.ratios},
        [(f"threshold {rt.threshold:.3f} @1:{rt.ratio}", rt.recall, rt.precision) for rt in per_ratio],
        out_dir / "pr_curves.png",
        f"Val-Realistic PR curves ({combo.key})",
    )
    return {
        "configuration": combo.key,
        "deployment_config": str(dep_path),
        "temperature": {
            "T": t,
            "ratio": cal.ratio,
            "nll_before": fit.nll_before,
            "nll_after": fit.nll_after,
            "ece_before": fit.ece_before,
            "ece_after": fit.ece_after,
        },
        "thresholds": [rt.__dict__ for rt in per_ratio],
        "operating": operating.__dict__,
        "region_thresholds": regions,
        "val_objects": _val_objects(cache, combo, cfg, t, operating.threshold),
        "cache_bytes": cache.nbytes(),
        "cache_tiles": cache.n_tiles,
    }
