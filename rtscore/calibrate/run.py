"""Calibration as the guide orders it (§10.4): gates -> deployment_config.yaml -> parity -> temperature, threshold.

`run_gates` decides TTA, then scales/fusion with the chosen TTA, from the caches of all seeds: the gated
deployment config. `calibrate_seed` refuses to go on if that config's numerics differ from the ones the cache
was computed with (guide §4.6), fits the temperature and the thresholds on exactly that configuration, and
returns the frozen config (threshold and temperature filled in) with its typed report. The stage writes both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.special import expit

from rtscore.calibrate.cache import CachedSums, Combo, LogitCache
from rtscore.calibrate.decisions import (
    GateDecision,
    RatioThreshold,
    best_precision,
    scale_gate,
    thresholds_at_ratios,
    tta_gate,
)
from rtscore.calibrate.plots import plot_pr_curves, plot_reliability
from rtscore.calibrate.temperature import fit_temperature
from rtscore.config.deployment import CalibratedNumerics, DeploymentConfig, ThresholdSource
from rtscore.config.pipeline import PipelineConfig
from rtscore.errors import PipelineError
from rtscore.inference.context import needs_context
from rtscore.metrics import ObjectCounter, object_metrics, weighted_hist
from rtscore.metrics.objects import iou_tag
from rtscore.report import md_table


class CalibrationError(PipelineError):
    """Calibration cannot run: missing inputs, or a deployment config it must not calibrate."""


class ParityError(CalibrationError):
    """deployment_config.yaml asks for other numerics than the ones calibration measured (guide §4.6)."""


class TargetPrecisionError(CalibrationError):
    """No threshold reaches calibration.target_precision at calibration.ratio, and no fallback was allowed."""


@dataclass(frozen=True)
class CalibrationPlots:
    """Where :func:`calibrate_seed` draws its figures."""

    reliability: Path
    pr_curves: Path


class TemperatureReport(BaseModel):
    """The temperature fit (NLL on the histograms at ``ratio``), with NLL and ECE before and after."""

    T: float = Field(..., description="Fitted temperature: calibrated probability = sigmoid(logit / T).")
    ratio: int = Field(..., description="Prevalence ratio 1:ratio the fit weights the negatives to.")
    nll_before: float = Field(..., description="NLL at T = 1.")
    nll_after: float = Field(..., description="NLL at the fitted T.")
    ece_before: float = Field(..., description="Expected calibration error at T = 1.")
    ece_after: float = Field(..., description="Expected calibration error at the fitted T.")


class ThresholdReport(BaseModel):
    """The lowest threshold reaching the target precision at one ratio (max-F1 when not reachable)."""

    ratio: int = Field(..., description="Prevalence ratio 1:ratio.")
    threshold: float = Field(..., description="Threshold on the calibrated probability.")
    threshold_logit: float = Field(..., description="The same threshold on the raw logit.")
    precision: float = Field(..., description="Validation precision at the threshold.")
    recall: float = Field(..., description="Validation recall at the threshold.")
    target_reached: bool = Field(..., description="Whether the target precision was reachable.")


class SeedCalibrationReport(BaseModel):
    """``calibration/seed_<n>/calibration_report.json``: one seed's calibration, written and read as this."""

    model_config = ConfigDict(ser_json_inf_nan="constants")

    configuration: str = Field(..., description="The cached configuration calibrated (TTA, scales, fusion).")
    deployment_config: str = Field(..., description="The seed's frozen deployment config file.")
    temperature: TemperatureReport = Field(..., description="Temperature fit.")
    thresholds: list[ThresholdReport] = Field(..., description="Thresholds at every reported ratio.")
    operating: ThresholdReport = Field(..., description="The operating threshold (at calibration.ratio).")
    threshold_source: ThresholdSource = Field(
        ..., description="target_precision, or max_f1_fallback (opted in by calibration.allow_max_f1_fallback)."
    )
    val_objects: dict[str, float | bool | int] = Field(
        default_factory=dict, description="Object P/R/F1 on Val-Realistic at the operating threshold."
    )
    cache_bytes: dict[str, int] = Field(..., description="Bytes of the logit cache: hist, dense and total.")
    cache_tiles: int = Field(..., description="Tiles in the logit cache.")
    canonical_1x: SeedCalibrationReport | None = Field(
        None,
        description="When the shipped scales are not [1.0]: the 1x calibration with the same TTA (its own "
        "temperature and threshold), the operating point of evaluate-test's canonical 1x table (guide §4.6).",
    )


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


def refuse_multiscale_without_context(cfg: PipelineConfig, reason: str) -> None:
    """A config that asks to ship 0.5x (deployment.scales, or calibration.allow_multiscale_deployment) cannot be
    calibrated without the 0.5x input (``reason``: why there is none); anything else only reports the scale gate
    "not evaluated"."""
    cal, dep = cfg.calibration, cfg.deployment
    asks = []
    if needs_context(dep.scales):
        asks.append(f"deployment.scales is {dep.scales}")
    if cal.allow_multiscale_deployment:
        asks.append("calibration.allow_multiscale_deployment is true")
    if asks:
        raise CalibrationError(
            f"{' and '.join(asks)}: that asks to ship a 0.5x pass, which cannot be calibrated: {reason}. "
            "hint: set deployment.scales: [1.0] and calibration.allow_multiscale_deployment: false, or give the run "
            "its context store (synthetic source: regenerate val and test with 0.5 in calibration.scale_candidates)"
        )


def cached_scales(caches: Sequence[LogitCache]) -> tuple[list[float], str | None]:
    """The scales every cache measured, and why candidate scales were not (None when none was left out)."""
    scales = [float(s) for s in caches[0].attrs["scale_candidates"]]
    for c in caches[1:]:
        if [float(s) for s in c.attrs["scale_candidates"]] != scales:
            raise CalibrationError(
                f"the logit caches measured different scales ({caches[0].path}: {scales}, {c.path}: "
                f"{c.attrs['scale_candidates']}); recompute them with one config"
            )
    notes = [c.attrs.get("scales_not_evaluated") for c in caches]
    return scales, next((n for n in notes if n), None)


def run_gates(cfg: PipelineConfig, caches: list[LogitCache]) -> tuple[DeploymentConfig, dict[str, Any]]:
    """TTA gate, then scale gate with the chosen TTA, over all seeds' caches; the gated deployment config.

    Threshold and temperature come back null: they are fitted afterwards on the configuration chosen here.
    """
    cal, dep = cfg.calibration, cfg.deployment
    if not caches:
        raise CalibrationError("no logit cache to decide on; run the logit-cache stage for at least one seed")
    gates: dict[str, Any] = {"ratio": cal.ratio, "target_precision": cal.target_precision}
    tta: str = dep.tta
    if cal.tta_gate:
        per_seed: list[dict[str, CachedSums]] = [
            {t: c.sums(Combo(t, (1.0,))) for t in cal.tta_candidates} for c in caches
        ]
        decision = tta_gate(per_seed, cal)
        tta = decision.chosen
        gates["tta"] = decision.to_json()
    else:
        gates["tta"] = {"gate": "tta", "chosen": tta, "reason": "calibration.tta_gate is false: deployment.tta kept"}
    fusion: str
    scales, fusion = list(dep.scales), dep.fusion
    measured, not_evaluated = cached_scales(caches)
    if not_evaluated is not None:
        refuse_multiscale_without_context(cfg, not_evaluated)
    if cal.scale_gate and not_evaluated is not None:
        gates["scales"] = {"gate": "scales", "chosen": scales, "evaluated": False, "reason": not_evaluated}
    elif cal.scale_gate and len(measured) > 1:
        multi = [Combo(tta, tuple(measured), f) for f in cal.fusion_candidates]
        per_seed_scale: list[dict[str, CachedSums]] = [
            {"1.0": c.sums(Combo(tta, (1.0,))), **{_fusion_name(m): c.sums(m) for m in multi}} for c in caches
        ]
        sd: GateDecision = scale_gate(per_seed_scale, "1.0", cal)
        verdict = [1.0] if sd.chosen == "1.0" else list(measured)
        gates["scales"] = sd.to_json() | {"verdict": verdict, "verdict_fusion": sd.chosen, "shipped": False}
        if cal.allow_multiscale_deployment:
            scales, fusion = verdict, (dep.fusion if sd.chosen == "1.0" else sd.chosen)
            gates["scales"]["shipped"] = True
        elif verdict != scales:
            gates["scales"]["reason"] = (
                f"{sd.reason}; verdict not shipped: calibration.allow_multiscale_deployment is false, "
                f"deployment.scales {scales} kept (guide §8.3: shipping multi-scale is a separate decision)"
            )
        gates["scales"]["chosen"] = scales  # what ships (the gate's own pick stays in verdict/verdict_fusion)
    else:
        gates["scales"] = {"gate": "scales", "chosen": scales, "reason": "scale gate off or one candidate scale"}
    update = {"tta": tta, "scales": scales, "fusion": fusion, "threshold": None, "temperature": None}
    gated = DeploymentConfig.model_validate(dep.model_copy(update=update).model_dump())
    return gated, gates


def _val_objects(
    cache: LogitCache, combo: Combo, cfg: PipelineConfig, temperature: float, threshold: float
) -> dict[str, Any]:
    """Object P/R/F1 on the validation pool at the operating threshold, from the full-resolution part (read one
    kept tile at a time; the only per-tile reading of calibration)."""
    counter = ObjectCounter.for_metrics(cfg.metrics, threshold)
    kept = np.zeros(cache.n_tiles, bool)
    areas = cache.pixel_area_m2
    for row, z, label in cache.dense_tiles(combo):
        counter.add_tile(z / temperature, label, float(areas[row]))
        kept[row] = True
    # Tiles not kept hold no GT object and no pixel above the floor: no object at thresholds above it.
    missed = ~kept
    n_pos_missed = int((cache.is_positive & missed).sum())
    counter.n_pos_tiles += n_pos_missed
    counter.n_neg_tiles += int(missed.sum()) - n_pos_missed
    raw_threshold = float(expit(temperature * math.log(threshold / (1 - threshold))))
    out: dict[str, Any] = {
        "exact": raw_threshold >= float(cache.attrs["object_prob_floor"]),
        "tiles_at_full_resolution": int(kept.sum()),
    }
    for r in cfg.metrics.ratios:
        for thr, s in object_metrics(counter, r).items():
            out[f"object_precision_{iou_tag(thr)}_1_{r}"] = s.precision
            out[f"object_recall_{iou_tag(thr)}_1_{r}"] = s.recall
            out[f"object_f1_{iou_tag(thr)}_1_{r}"] = s.f1
    return out


def _unreachable_target(
    ch: CachedSums, cfg: PipelineConfig, cache: LogitCache, combo: Combo, temperature: float
) -> TargetPrecisionError:
    """The error of a pool on which no threshold reaches the target precision, naming the best one reached."""
    cal = cfg.calibration
    best = best_precision(ch.hist, cal.ratio)
    if math.isnan(best.precision):
        where = "no threshold calls any RTS pixel"
    else:
        prob = float(expit(best.threshold_logit / temperature))
        where = (
            f"the best precision reached is {best.precision:.3f} (recall {best.recall:.3f}) at threshold "
            f"{prob:.4f} (logit {best.threshold_logit:.3f}, T {temperature:.3f})"
        )
    return TargetPrecisionError(
        f"calibration.target_precision {cal.target_precision} is not reachable at 1:{cal.ratio} "
        f"(calibration.ratio) on Val-Realistic ({combo.key}, logit cache {cache.path}): {where}. "
        "hint: lower calibration.target_precision, improve the model, or set calibration.allow_max_f1_fallback: "
        "true to ship the max-F1 threshold (recorded as threshold_source: max_f1_fallback in "
        "deployment_config.yaml and flagged by `rts package verify` and the test report)"
    )


def calibrate_seed(
    dep: DeploymentConfig, cache: LogitCache, cfg: PipelineConfig, plots: CalibrationPlots | None, *, source: Path
) -> tuple[DeploymentConfig, SeedCalibrationReport]:
    """Temperature and threshold for one seed on the configuration ``dep`` names (``source``: where that
    config is written, for messages).

    Returns:
        The frozen deployment config (threshold, temperature, their source and the calibrated numerics set) and
        the calibration report (the content of ``calibration_report.json``).

    Raises:
        TargetPrecisionError: No threshold reaches ``calibration.target_precision`` at ``calibration.ratio`` and
            ``calibration.allow_max_f1_fallback`` is off.
    """
    cal = cfg.calibration
    combo = check_parity(dep, cache, source)
    ch = cache.sums(combo)
    if ch.hist.n_pos_tiles == 0:
        raise CalibrationError(f"the validation pool in {cache.path} has no positive tile: nothing to calibrate on")
    fit = fit_temperature(ch.hist, cal.ratio, bounds=cal.temperature_bounds)
    t = fit.temperature
    per_ratio, operating, threshold_source = _operating_threshold(ch, cfg, cache, combo, t)
    frozen = _frozen(dep, cache, combo, operating.threshold, t, threshold_source)
    if plots is not None:
        _plot(plots, ch, cfg, cache, combo, t, per_ratio)
    report = SeedCalibrationReport(
        configuration=combo.key,
        deployment_config=str(source),
        temperature=TemperatureReport(
            T=t,
            ratio=cal.ratio,
            nll_before=fit.nll_before,
            nll_after=fit.nll_after,
            ece_before=fit.ece_before,
            ece_after=fit.ece_after,
        ),
        thresholds=[ThresholdReport(**rt.__dict__) for rt in per_ratio],
        operating=ThresholdReport(**operating.__dict__),
        threshold_source=threshold_source,
        val_objects=_val_objects(cache, combo, cfg, t, operating.threshold),
        cache_bytes=cache.nbytes(),
        cache_tiles=cache.n_tiles,
    )
    return frozen, report


def _operating_threshold(
    ch: CachedSums, cfg: PipelineConfig, cache: LogitCache, combo: Combo, temperature: float
) -> tuple[list[RatioThreshold], RatioThreshold, ThresholdSource]:
    """The thresholds at every reported ratio, the operating one (at ``calibration.ratio``) and where it comes
    from: the target precision, or (allowed, when no threshold reaches it) the max-F1 fallback.

    Raises:
        TargetPrecisionError: the target is not reachable and the fallback is off.
    """
    cal = cfg.calibration
    ratios = sorted({*cfg.metrics.ratios, cal.ratio})
    per_ratio = thresholds_at_ratios(ch.hist, ratios, cal.target_precision, temperature)
    operating = next(rt for rt in per_ratio if rt.ratio == cal.ratio)
    threshold_source: ThresholdSource = "target_precision"
    if not operating.target_reached:
        if not cal.allow_max_f1_fallback:
            raise _unreachable_target(ch, cfg, cache, combo, temperature)
        threshold_source = "max_f1_fallback"
    return per_ratio, operating, threshold_source


def _frozen(
    dep: DeploymentConfig,
    cache: LogitCache,
    combo: Combo,
    threshold: float,
    temperature: float,
    threshold_source: ThresholdSource,
) -> DeploymentConfig:
    """``dep`` frozen: the threshold, temperature and their source, and the numerics the cache was computed with."""
    numerics = CalibratedNumerics.model_validate(  # validated: the cache's strings must be known modes
        {
            "precision": cache.attrs["precision"],
            "torch_compile": bool(cache.attrs["torch_compile"]),
            "tta": combo.tta,
            "scales": list(combo.scales),
            "fusion": combo.fusion,
        }
    )
    updated = dep.model_copy(
        update={
            "threshold": threshold,
            "temperature": temperature,
            "threshold_source": threshold_source,
            "calibrated_with": numerics,
        }
    )
    return DeploymentConfig.model_validate(updated.model_dump())


def _plot(
    plots: CalibrationPlots,
    ch: CachedSums,
    cfg: PipelineConfig,
    cache: LogitCache,
    combo: Combo,
    temperature: float,
    per_ratio: list[RatioThreshold],
) -> None:
    """The reliability diagram at ``calibration.ratio`` and the PR curves at every ratio, thresholds marked."""
    cal = cfg.calibration
    pos, neg = weighted_hist(ch.hist, cal.ratio)
    plot_reliability(
        pos, neg, cache.bins, temperature, cal.ece_bins, plots.reliability, f"Val-Realistic 1:{cal.ratio}, {combo.key}"
    )
    plot_pr_curves(
        {f"1:{r}": (*weighted_hist(ch.hist, r), cache.bins) for r in cfg.metrics.ratios},
        [(f"threshold {rt.threshold:.3f} @1:{rt.ratio}", rt.recall, rt.precision) for rt in per_ratio],
        plots.pr_curves,
        f"Val-Realistic PR curves ({combo.key})",
    )


def one_x(dep: DeploymentConfig) -> DeploymentConfig:
    """The 1x configuration of a (gated or frozen) deployment config: same numerics and TTA, scales [1.0], not
    calibrated (the canonical evaluate-test contract, guide §4.6)."""
    update = {"scales": [1.0], "threshold": None, "temperature": None, "calibrated_with": None}
    return DeploymentConfig.model_validate(dep.model_copy(update=update | {"threshold_source": None}).model_dump())


def render_report(
    cfg: PipelineConfig, gates: dict[str, Any], reports: dict[int, SeedCalibrationReport], shipped: int
) -> str:
    """``calibration/report.md``: the gates' tables, each seed's temperature and thresholds, the shipped seed."""
    cal = cfg.calibration
    lines = [
        "# Calibration (Val-Realistic)",
        "",
        f"Decisions at 1:{cal.ratio}, target precision {cal.target_precision}.",
        "",
        f"- **TTA**: `{gates['tta']['chosen']}`: {gates['tta']['reason']}",
        f"- **Scales**: `{gates['scales']['chosen']}`: {gates['scales']['reason']}",
        f"- **Shipped seed**: {shipped}",
        "",
    ]
    lines += _gate_tables(gates)
    lines += _seeds_table(reports)
    lines += ["", "Thresholds per ratio (calibrated probability, precision, recall):", ""]
    for s, r in reports.items():
        parts = [f"1:{t.ratio} {t.threshold:.4f} (P {t.precision:.3f}, R {t.recall:.3f})" for t in r.thresholds]
        lines.append(f"- seed {s}: " + "; ".join(parts))
    lines += _canonical_lines(reports)
    return "\n".join(lines) + "\n"


def _gate_tables(gates: dict[str, Any]) -> list[str]:
    """Each gate's candidates (the TTA gate's, then the scale gate's) with their metric, gain, side cost and
    verdict; nothing for a gate that measured none (switched off, one candidate)."""
    lines: list[str] = []
    for gate in ("tta", "scales"):
        rows = gates[gate].get("rows") or []
        if rows:
            metric = "PR-AUC" if gate == "tta" else "large-RTS PR-AUC"
            side = "precision drop" if gate == "tta" else "FP-rate rise"
            lines += md_table(
                [f"{gate} candidate", metric, "gain", side, "passes"],
                [
                    [
                        r["name"],
                        f"{r['metric_mean']:.4f}",
                        f"{r['gain_mean']:+.2%}",
                        f"{r['side_mean']:+.2%}",
                        "yes" if r["passes"] else "no",
                    ]
                    for r in rows
                ],
            )
            lines.append("")
    return lines


def _seeds_table(reports: dict[int, SeedCalibrationReport]) -> list[str]:
    """One row per seed: its temperature with NLL and ECE before and after, and its operating threshold (flagged
    when it is the max-F1 fallback) with the precision and recall there."""
    seed_rows = []
    for s, r in reports.items():
        t, op = r.temperature, r.operating
        flag = "" if r.threshold_source == "target_precision" else " (**max-F1 fallback**: target not reachable)"
        seed_rows.append(
            [
                s,
                f"{t.T:.3f}",
                f"{t.nll_before:.4f} → {t.nll_after:.4f}",
                f"{t.ece_before:.4f} → {t.ece_after:.4f}",
                f"{op.threshold:.4f}{flag}",
                f"{op.precision:.3f}",
                f"{op.recall:.3f}",
            ]
        )
    header = ["seed", "T", "NLL before → after", "ECE before → after", "threshold", "precision", "recall"]
    return md_table(header, seed_rows)


def _canonical_lines(reports: dict[int, SeedCalibrationReport]) -> list[str]:
    """The seeds' canonical 1x operating points (only when the shipped scales are not [1.0]: none otherwise), which
    evaluate-test's canonical table runs at."""
    canonical = {s: r.canonical_1x for s, r in reports.items() if r.canonical_1x is not None}
    if not canonical:
        return []
    lines = [
        "",
        "Canonical 1x operating point (same TTA, scales [1.0]; evaluate-test's canonical table runs at it):",
        "",
    ]
    for s, c in canonical.items():
        lines.append(
            f"- seed {s}: T {c.temperature.T:.3f}, threshold {c.operating.threshold:.4f} "
            f"(P {c.operating.precision:.3f}, R {c.operating.recall:.3f}, {c.threshold_source}); "
            f"{c.deployment_config}"
        )
    return lines
