"""Stage train-seed: one seed trained (or resumed) into its seed directory; the multi-seed bookkeeping."""

from __future__ import annotations

import statistics
from collections.abc import Callable

from pydantic import BaseModel, Field

from rtscore.config.base import config_hash
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages.seed_records import SeedAttempts, SeedRecorder, forget_seed, stage_checkpoint
from rtscore.stages.spec import TRAINING_CONFIG, ArtifactRef, StageSpec, record, require_inputs, resume_key
from rtscore.storage import RunDir, RunLayout, atomic_write_json
from rtscore.tracking import Tracker
from rtscore.train.loop import resume_hash
from rtscore.train.loop import train_seed as run_training
from rtscore.train.result import MultiSeedSummary, SeedResult

SEED_OUTPUTS = (RunLayout.BEST_WEIGHTS, RunLayout.SEED_METRICS, RunLayout.SEED_SUMMARY, RunLayout.SEED_CURVES)


class TrainResult(BaseModel):
    """A trained seed: its summary and the artifacts recorded in the manifest."""

    result: SeedResult = Field(..., description="Best metric, epochs, MLflow run of the seed.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded seed artifacts.")
    attempts: SeedAttempts | None = Field(
        None, description="Who trained the seed, attempt by attempt (attempts.json; none from older versions)."
    )


def train_seed(
    run_dir: str,
    cfg: PipelineConfig,
    seed: int,
    *,
    fresh: bool = False,
    parent_run_id: str | None = None,
    progress: bool = False,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train (or resume) one seed into ``seeds/seed_<seed>/`` and record its artifacts.

    Every resume checkpoint is recorded in the run root as it is written (:mod:`rtscore.stages.seed_records`),
    so a run on a fresh worker resumes from the newest one recorded, and only when it was written under the same
    resume key (this stage's code, the config less the settings free on resume, the inputs' sha256): another is
    set aside and the seed trains from scratch. ``on_epoch_end(epoch, metrics)`` is called
    after every epoch (e.g. to advance a progress display).
    """
    run = RunDir(run_dir)
    require_inputs(SPEC, run, seed=seed)
    if fresh:
        forget_seed(run, seed)
    else:
        stage_checkpoint(run, seed)
    recorder = SeedRecorder(run, SPEC, cfg, seed)
    key = resume_key(SPEC, run, cfg, {"seed": seed}, config_hash=resume_hash(cfg))
    result = run_training(
        cfg,
        run.root,
        seed,
        fresh=fresh,
        parent_run_id=parent_run_id,
        progress=progress,
        on_epoch_end=on_epoch_end,
        hooks=recorder,
        resume_key=key,
    )
    rels = [entry.at(seed=seed) for entry in SEED_OUTPUTS]
    refs = [record(SPEC, run, rel, cfg) for rel in rels if run.path(rel).exists()]
    recorder.finished()
    return TrainResult(result=result, artifacts=refs, attempts=recorder.attempts)


def start_multiseed(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> str | None:
    """The parent MLflow run of a multi-seed training (nested seed runs hang under it)."""
    tracker = Tracker(cfg.mlflow, RunDir(run_dir).root)
    run_id = tracker.start_run(
        "multi-seed", tags={"rts.seeds": ",".join(map(str, seeds)), "rts.config_hash": config_hash(cfg)}
    )
    tracker.log_params(run_id, {"seeds": seeds, "model": cfg.model.backbone, "architecture": cfg.model.architecture})
    return run_id


def finish_multiseed(
    run_dir: str, cfg: PipelineConfig, parent_run_id: str | None, results: list[TrainResult]
) -> ArtifactRef:
    """``seeds/summary.json``: best metric per seed and mean ± std (std undefined for one seed); logged on the
    parent MLflow run."""
    run = RunDir(run_dir)
    values = [r.result.best_metric for r in results]
    summary = MultiSeedSummary(
        seeds=[r.result for r in results],
        best_val_realistic_pr_auc_geomean_mean=statistics.fmean(values) if values else None,
        best_val_realistic_pr_auc_geomean_std=statistics.stdev(values) if len(values) > 1 else None,
        parent_mlflow_run_id=parent_run_id,
    )
    rel = RunLayout.SEEDS_SUMMARY.at()
    atomic_write_json(run.path(rel), summary.model_dump(mode="python"))
    tracker = Tracker(cfg.mlflow, run.root)
    figures = summary.model_dump(
        include={"best_val_realistic_pr_auc_geomean_mean", "best_val_realistic_pr_auc_geomean_std"}
    )
    tracker.log_metrics(parent_run_id, {k: v for k, v in figures.items() if isinstance(v, float)}, step=0)
    tracker.end_run(parent_run_id)
    return record(MULTI_SEED_SPEC, run, rel, cfg)


SPEC = StageSpec(
    name="train-seed",
    fn=train_seed,
    inputs=(
        RunLayout.DATASET.bind(split="train"),
        RunLayout.DATASET.bind(split="val"),
        RunLayout.NORMALIZATION_STATS,
    ),
    outputs=(*SEED_OUTPUTS, RunLayout.RESUME_EPOCH, RunLayout.SEED_ATTEMPTS),
    config=TRAINING_CONFIG,
    params=("seed",),
    description="Train one seed; re-running resumes from its newest checkpoint recorded in the run root.",
)

# Not cached on its own: it summarises the seeds' results once they are all in.
MULTI_SEED_SPEC = StageSpec(
    name="multi-seed-train",
    fn=finish_multiseed,
    inputs=(RunLayout.SEED_SUMMARY,),
    outputs=(RunLayout.SEEDS_SUMMARY,),
    config=TRAINING_CONFIG,
    params=("seeds",),
    description="Mean ± std of the seeds' best validation metric under one parent MLflow run.",
)
