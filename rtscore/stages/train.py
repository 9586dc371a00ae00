"""Stage train-seed: one seed trained (or resumed) into its seed directory, and its result read back from the run."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.stages.spec import (
    TRAINING_CONFIG,
    ArtifactRef,
    StageSpec,
    record,
    recorded,
    require_inputs,
    resume_key,
)
from rtscore.storage import RunDir, RunLayout, StorageError
from rtscore.train.distributed import resolve_devices
from rtscore.train.launch import train_on_devices as run_training
from rtscore.train.loop import resume_hash
from rtscore.train.records import SeedAttempts, SeedRecorder, forget_seed, read_attempts, stage_checkpoint
from rtscore.train.result import SeedResult, read_seed_summary

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

    Every resume checkpoint is recorded in the run root as it is written (:mod:`rtscore.train.records`, which
    records through this stage's :func:`record`), so a run on a fresh worker resumes from the newest one recorded,
    and only when it was written under the same resume key (this stage's code, the config less the settings free
    on resume with training.batch_size taken as the effective batch on this machine's ranks, the inputs' sha256):
    another is set aside and the seed trains from scratch.
    ``on_epoch_end(epoch, metrics)`` is called after every epoch (e.g. to advance a progress display).
    """
    run = RunDir(run_dir)
    require_inputs(SPEC, run, seed=seed)
    if fresh:
        forget_seed(run, seed)
    else:
        stage_checkpoint(run, seed)
    recorder = SeedRecorder(
        run, seed, record=lambda rel: record(SPEC, run, rel, cfg), keep_last_n=cfg.training.checkpoint.keep_last_n
    )
    ranks = resolve_devices(cfg)  # where the seed trains: its effective batch keys the resume point
    key = resume_key(SPEC, run, cfg, {"seed": seed}, config_hash=resume_hash(cfg, ranks))
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


def recorded_train_result(run: RunDir, seed: int) -> TrainResult:
    """A trained seed's result, from what its train-seed run recorded in the run directory (e.g. on another worker).

    The weights and the summary are checked against the manifest (for a gs:// run: staged into this worker's
    mirror and verified there, where the stages after training read them next).

    Raises:
        StorageError: the seed's artifacts are not recorded or do not match, or its summary is unreadable or of
            another seed.
    """
    summary = RunLayout.SEED_SUMMARY.at(seed=seed)
    for rel in (RunLayout.BEST_WEIGHTS.at(seed=seed), summary):
        try:
            run.verify(rel)
        except StorageError as err:
            raise StorageError(f"its artifacts are not in the run: {err}") from None
    try:
        result = read_seed_summary(run.path(summary)).to_result(str(run.at(RunLayout.SEED_DIR, seed=seed)))
    except StorageError as err:
        raise StorageError(f"its summary cannot be read: {err}") from None
    if result.seed != seed:
        raise StorageError(f"{run.path(summary)} is the summary of seed {result.seed}")
    return TrainResult(
        result=result,
        artifacts=recorded(SPEC, run, {"seed": seed}, SEED_OUTPUTS),  # not the rotating checkpoints, pruned later
        attempts=read_attempts(run, seed),
    )


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
