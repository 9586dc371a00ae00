"""Stage normalization-stats: per-channel statistics of the train split only (guide §4.5)."""

from __future__ import annotations

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.normalization.compute import compute_normalization_stats
from rtscore.data.normalization.stats import write_normalization_stats
from rtscore.stages.spec import ArtifactRef, StageSpec, record, require_inputs
from rtscore.storage import RunDir, RunLayout


def normalization_stats(run_dir: str, cfg: PipelineConfig, *, progress: bool = False) -> ArtifactRef:
    """``normalization_stats.json`` from the train store only."""
    run = RunDir(run_dir)
    require_inputs(SPEC, run)
    stats = compute_normalization_stats(
        run.at(RunLayout.DATASET, split="train"),
        extra_channels=cfg.channels.extra,  # names and EXTRA bands: checked against the store's binding
        clip_percentiles=cfg.normalization.clip_percentiles,
        max_tiles=cfg.normalization.max_tiles,
        progress=progress,
    )
    rel = RunLayout.NORMALIZATION_STATS.at()
    run.forget(rel)
    write_normalization_stats(stats, run.path(rel))
    return record(SPEC, run, rel, cfg)


SPEC = StageSpec(
    name="normalization-stats",
    fn=normalization_stats,
    inputs=(RunLayout.DATASET.bind(split="train"),),
    outputs=(RunLayout.NORMALIZATION_STATS,),
    # The channels it binds and its own settings, over the train store; not the sampler, augmentation or loader.
    config=("schema_version", "data", "channels", "splits", "normalization"),
    config_ignores=("data.loader",),
    params=(),
    description="Per-channel mean/std of the train split, bound to channel names.",
)
