"""Stage calibrate: TTA and scale gates over all seeds' caches, each seed's temperature and threshold, and
the one decision of which seed ships (guide §10.4 steps 2-5)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from rtscore.calibrate.cache import CacheError, LogitCache
from rtscore.calibrate.run import (
    CalibrationPlots,
    SeedCalibrationReport,
    calibrate_seed,
    one_x,
    render_report,
    run_gates,
)
from rtscore.config.base import dump_yaml
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.errors import PipelineError
from rtscore.inference.context import needs_context
from rtscore.stages.logit_cache import cache_identity
from rtscore.stages.seeds import trained_seeds
from rtscore.stages.spec import TRAINING_CONFIG, ArtifactRef, StageSpec, record, require_inputs
from rtscore.storage import RunDir, RunLayout, StorageError, atomic_write_json, atomic_write_text, sha256_file
from rtscore.train.result import SeedSummary, read_seed_summary


class SeedCalibration(BaseModel):
    """One seed's calibrated operating point."""

    seed: int = Field(..., description="Training seed.")
    temperature: float = Field(..., description="Fitted temperature T.")
    threshold: float = Field(..., description="Operating threshold on sigmoid(logit / T).")
    precision: float = Field(..., description="Val-Realistic precision at the threshold (calibration ratio).")
    recall: float = Field(..., description="Val-Realistic recall at the threshold (calibration ratio).")
    target_reached: bool = Field(..., description="Whether the target precision was reachable.")


class CalibrationSummary(BaseModel):
    """``calibration/summary.json``: the shipped seed (decided here, once) and every seed's point."""

    shipped_seed: int = Field(..., description="The seed the deployment package ships.")
    shipped_reason: str = Field(..., description="Why that seed: package.seed, or the best validation metric.")
    seeds: list[SeedCalibration] = Field(..., description="Per-seed calibration.")
    tta_reason: str = Field(..., description="Why the TTA gate chose what it chose.")
    scales_reason: str = Field(..., description="Why the scale gate chose what it chose.")


class CalibrationResult(BaseModel):
    """What calibrate hands on: the frozen deployment config of the shipped seed, the summary, the artifacts."""

    deployment: DeploymentConfig = Field(..., description="calibration/deployment_config.yaml (shipped seed).")
    summary: CalibrationSummary = Field(..., description="Shipped seed and per-seed calibration.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded calibration artifacts.")

    @property
    def shipped_seed(self) -> int:
        return self.summary.shipped_seed


def choose_shipped_seed(summaries: Sequence[SeedSummary], requested: int | None) -> tuple[int, str]:
    """``requested`` (package.seed) if calibrated; else the best smoothed validation metric (ties: the lowest
    seed; NaN never wins). Returns (seed, reason)."""
    by_seed = {s.seed: s for s in summaries}
    if requested is not None:
        if requested not in by_seed:
            raise PipelineError(f"package.seed {requested} is not among the calibrated seeds {sorted(by_seed)}")
        return requested, f"package.seed is {requested}"

    def key(s: SeedSummary) -> tuple[float, int]:
        m = s.best_val_realistic_pr_auc_geomean_smoothed
        return (m if m is not None and math.isfinite(m) else -math.inf, -s.seed)

    best = max(summaries, key=key)
    return best.seed, f"best smoothed validation metric among seeds {sorted(by_seed)}"


def calibrate(run_dir: str, cfg: PipelineConfig, seeds: list[int] | None = None) -> CalibrationResult:
    """Gates on all seeds' caches, then per seed temperature and threshold; ``calibration/``."""
    run = RunDir(run_dir)
    seeds = trained_seeds(run, seeds)
    require_inputs(SPEC, run, seeds=seeds)
    caches = [_checked_cache(run, cfg, s) for s in seeds]
    outputs = _clear_outputs(run, seeds)
    gated, gates = run_gates(cfg, caches)
    atomic_write_json(run.at(RunLayout.GATES), gates)
    frozen: dict[int, DeploymentConfig] = {}
    reports: dict[int, SeedCalibrationReport] = {}
    for s, cache in zip(seeds, caches, strict=True):
        frozen[s], reports[s] = _calibrate_seed(run, cfg, gated, cache, s, outputs)
    summary = _shipped(run, cfg, seeds, reports, gates)
    dump_yaml(frozen[summary.shipped_seed], run.at(RunLayout.DEPLOYMENT_CONFIG))
    atomic_write_text(run.at(RunLayout.CALIBRATION_SUMMARY), summary.model_dump_json(indent=2) + "\n")
    atomic_write_text(run.at(RunLayout.CALIBRATION_REPORT_MD), render_report(cfg, gates, reports, summary.shipped_seed))
    refs = [record(SPEC, run, rel, cfg) for rel in outputs]
    return CalibrationResult(deployment=frozen[summary.shipped_seed], summary=summary, artifacts=refs)


def _checked_cache(run: RunDir, cfg: PipelineConfig, seed: int) -> LogitCache:
    """The seed's logit cache, refused unless computed from its weights by this code, config and inputs."""
    cache = LogitCache(run.at(RunLayout.LOGIT_CACHE, seed=seed))
    weights = run.at(RunLayout.BEST_WEIGHTS, seed=seed)
    if cache.attrs.get("weights_sha256") != sha256_file(weights):
        raise CacheError(f"the logit cache {cache.path} was computed from other weights than {weights}; rerun it")
    if cache.attrs.get("identity") != cache_identity(run, cfg, seed):
        raise CacheError(
            f"the logit cache {cache.path} was computed by other code, config or inputs than this run's "
            f"(identity {str(cache.attrs.get('identity'))[:12]} vs {cache_identity(run, cfg, seed)[:12]}); "
            "recompute it (rts calibrate does, or rts run)"
        )
    return cache


def _clear_outputs(run: RunDir, seeds: list[int]) -> list[str]:
    """Forget the outputs of an earlier calibration (and delete stale 1x configs); the outputs to record."""
    outputs = [e.at() for e in (RunLayout.DEPLOYMENT_CONFIG, RunLayout.GATES, RunLayout.CALIBRATION_SUMMARY)]
    outputs.append(RunLayout.CALIBRATION_REPORT_MD.at())
    per_seed = (
        RunLayout.SEED_DEPLOYMENT_CONFIG,
        RunLayout.SEED_CALIBRATION_REPORT,
        RunLayout.SEED_RELIABILITY,
        RunLayout.SEED_PR_CURVES,
    )
    outputs += [e.at(seed=s) for s in seeds for e in per_seed]
    stale_1x = [RunLayout.SEED_DEPLOYMENT_CONFIG_1X.at(seed=s) for s in seeds]
    for rel in [*outputs, *stale_1x]:
        run.forget(rel)
    for rel in stale_1x:  # written again only where the shipped scales are not [1.0]
        run.path(rel).unlink(missing_ok=True)
    return outputs


def _calibrate_seed(
    run: RunDir, cfg: PipelineConfig, gated: DeploymentConfig, cache: LogitCache, s: int, outputs: list[str]
) -> tuple[DeploymentConfig, SeedCalibrationReport]:
    """One seed's temperature and threshold under the gated deployment, its frozen config and report written (and
    the canonical 1x point beside them when the gated scales are not 1x, added to ``outputs``)."""
    source = run.at(RunLayout.SEED_DEPLOYMENT_CONFIG, seed=s)
    run.at(RunLayout.SEED_CALIBRATION, seed=s).mkdir(parents=True, exist_ok=True)
    plots = CalibrationPlots(
        reliability=run.at(RunLayout.SEED_RELIABILITY, seed=s), pr_curves=run.at(RunLayout.SEED_PR_CURVES, seed=s)
    )
    frozen, report = calibrate_seed(gated, cache, cfg, plots, source=source)
    if needs_context(gated.scales):  # the canonical 1x operating point too (same TTA), for evaluate-test
        rel_1x = RunLayout.SEED_DEPLOYMENT_CONFIG_1X.at(seed=s)
        dep_1x, report_1x = calibrate_seed(one_x(gated), cache, cfg, None, source=run.path(rel_1x))
        dump_yaml(dep_1x, run.path(rel_1x))
        report = report.model_copy(update={"canonical_1x": report_1x})
        outputs.append(rel_1x)
    dump_yaml(frozen, source)
    atomic_write_json(run.at(RunLayout.SEED_CALIBRATION_REPORT, seed=s), report.model_dump(mode="python"))
    return frozen, report


def _shipped(
    run: RunDir,
    cfg: PipelineConfig,
    seeds: list[int],
    reports: dict[int, SeedCalibrationReport],
    gates: dict[str, Any],
) -> CalibrationSummary:
    """The calibration summary: the shipped seed (decided here, once) and every seed's operating point."""
    summaries = []
    for s in seeds:
        run.fetch(RunLayout.SEED_SUMMARY.at(seed=s))
        summaries.append(read_seed_summary(run.at(RunLayout.SEED_SUMMARY, seed=s)))
    shipped, reason = choose_shipped_seed(summaries, cfg.package.seed)
    return CalibrationSummary(
        shipped_seed=shipped,
        shipped_reason=reason,
        seeds=[
            SeedCalibration(
                seed=s,
                temperature=r.temperature.T,
                threshold=r.operating.threshold,
                precision=r.operating.precision,
                recall=r.operating.recall,
                target_reached=r.operating.target_reached,
            )
            for s, r in reports.items()
        ],
        tta_reason=str(gates["tta"]["reason"]),
        scales_reason=str(gates["scales"]["reason"]),
    )


def read_calibration_summary(run: RunDir) -> CalibrationSummary:
    """The calibration summary of a run (staged from gs:// and verified), or StorageError naming the file."""
    rel = RunLayout.CALIBRATION_SUMMARY.at()
    run.require(rel)
    path = run.path(rel)
    try:
        return CalibrationSummary.model_validate_json(path.read_text())
    except ValueError as err:
        raise StorageError(f"{path} is not a valid calibration summary: {err}") from None


def calibrated_seeds(run: RunDir) -> list[int]:
    """The seeds of the run's last calibration: what evaluate-test and package take when no seeds are given
    (so `rts train --seed 42` -> calibrate -> evaluate-test -> package build needs no --seeds)."""
    return sorted(p.seed for p in read_calibration_summary(run).seeds)


SPEC = StageSpec(
    name="calibrate",
    fn=calibrate,
    inputs=(RunLayout.BEST_WEIGHTS, RunLayout.LOGIT_CACHE, RunLayout.SEED_SUMMARY),
    outputs=(
        RunLayout.DEPLOYMENT_CONFIG,
        RunLayout.GATES,
        RunLayout.CALIBRATION_SUMMARY,
        RunLayout.CALIBRATION_REPORT_MD,
        RunLayout.SEED_DEPLOYMENT_CONFIG,
        RunLayout.SEED_CALIBRATION_REPORT,
        RunLayout.SEED_RELIABILITY,
        RunLayout.SEED_PR_CURVES,
        RunLayout.SEED_DEPLOYMENT_CONFIG_1X,
    ),
    config=(*TRAINING_CONFIG, "deployment", "calibration", "package.seed"),
    params=("seeds",),
    description="Gate TTA and scales, fit each seed's temperature and threshold, decide the shipped seed.",
)
