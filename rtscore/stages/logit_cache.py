"""Stage logit-cache: one pass over Val-Realistic per (scale, TTA transform), kept as logit statistics."""

from __future__ import annotations

from rtscore.calibrate.cache import build_logit_cache
from rtscore.calibrate.run import refuse_multiscale_without_context
from rtscore.config.pipeline import PipelineConfig
from rtscore.inference.context import needs_context
from rtscore.stages.seeds import context_store, no_context_reason, seed_model_and_loader
from rtscore.stages.spec import (
    TRAINING_CONFIG,
    ArtifactRef,
    StageSpec,
    record,
    recorded,
    require_inputs,
    resume_key,
)
from rtscore.storage import RunDir, RunLayout, StorageError, sha256_file

# The decision settings: the cache serves every value of these, so they never invalidate it.
DECISION_SETTINGS = (
    "calibration.ratio",
    "calibration.target_precision",
    "calibration.tta_gate",
    "calibration.tta_min_pr_auc_gain",
    "calibration.tta_max_precision_drop",
    "calibration.scale_gate",
    "calibration.scale_min_large_pr_auc_gain",
    "calibration.scale_max_fp_rate_increase",
    "calibration.allow_multiscale_deployment",
    "calibration.allow_max_f1_fallback",
    "calibration.temperature_bounds",
    "calibration.ece_bins",
    "deployment.threshold",
    "deployment.temperature",
    "deployment.tta",
    "deployment.scales",
    "deployment.fusion",
    "deployment.threshold_source",
    "deployment.calibrated_with",
)


def logit_cache(run_dir: str, cfg: PipelineConfig, seed: int, *, progress: bool = False) -> ArtifactRef:
    """``calibration/seed_<n>/logit_cache.zarr``: one pass over Val-Realistic per (scale, TTA transform).

    0.5x is cached from the val context store (each tile's 2x field of view, paired by tile id); without one only
    [1.0] is cached, the scale gate reports "not evaluated", and a config that asks to ship 0.5x is refused."""
    run = RunDir(run_dir)
    require_inputs(SPEC, run, seed=seed)
    weights = run.at(RunLayout.BEST_WEIGHTS, seed=seed)
    scales, note = list(cfg.calibration.scale_candidates), None
    with_context = needs_context(scales) and context_store(run, "val") is not None
    if needs_context(scales) and not with_context:
        reason = no_context_reason("val")
        refuse_multiscale_without_context(cfg, reason)
        scales, note = [1.0], f"not evaluated: {reason}; only [1.0] was cached"
    model, loader, n = seed_model_and_loader(run, cfg, seed, "val", context=with_context)
    rel = RunLayout.LOGIT_CACHE.at(seed=seed)
    run.forget(rel)
    val = run.entry(RunLayout.DATASET.at(split="val"))
    ctx = run.entry(RunLayout.CONTEXT_DATASET.at(split="val"))
    build_logit_cache(
        model,
        loader,
        cfg,
        run.path(rel),
        n_tiles=n,
        attrs={
            "seed": seed,
            "weights_sha256": sha256_file(weights),
            "val_sha256": val.sha256 if val else None,
            "val_context_sha256": ctx.sha256 if with_context and ctx else None,
            "identity": cache_identity(run, cfg, seed),
        },
        progress=progress,
        scales=scales,
        scales_note=note,
    )
    return record(SPEC, run, rel, cfg)


def cache_identity(run: RunDir, cfg: PipelineConfig, seed: int) -> str:
    """What a seed's logit cache was computed from: this stage's code, the config it reads (less the decision
    settings it serves) and its inputs (weights, val store, stats). Recorded in the cache; calibration uses a
    cache only when it equals what the current code, config and inputs give."""
    return resume_key(SPEC, run, cfg, {"seed": seed}, config_hash=SPEC.config_hash(cfg))


def recorded_logit_caches(run: RunDir, seeds: list[int]) -> list[ArtifactRef]:
    """Each seed's logit cache as its logit-cache run recorded it (e.g. on another worker), in the order of
    ``seeds``. Only the records are read: calibrate verifies the caches when it requires them (a gs:// cache is
    staged into this worker's mirror then).

    Raises:
        StorageError: a seed has no recorded cache.
    """
    refs = {r.path: r for r in recorded(SPEC, run, {"seeds": seeds})}
    missing = [s for s in seeds if RunLayout.LOGIT_CACHE.at(seed=s) not in refs]
    if missing:
        raise StorageError(
            f"{run.uri} records no {RunLayout.LOGIT_CACHE.at(seed=missing[0])} by stage {SPEC.name} "
            f"(seeds without a cache: {missing})"
        )
    return [refs[RunLayout.LOGIT_CACHE.at(seed=s)] for s in seeds]


SPEC = StageSpec(
    name="logit-cache",
    fn=logit_cache,
    inputs=(RunLayout.DATASET.bind(split="val"), RunLayout.NORMALIZATION_STATS, RunLayout.BEST_WEIGHTS),
    optional_inputs=(RunLayout.CONTEXT_DATASET.bind(split="val"),),
    outputs=(RunLayout.LOGIT_CACHE,),
    config=(*TRAINING_CONFIG, "deployment", "calibration"),
    config_ignores=DECISION_SETTINGS,
    params=("seed",),
    description="Cache Val-Realistic logit statistics of one seed for every TTA/scale candidate.",
)
