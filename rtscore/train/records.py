"""A seed's training recorded in the run root as it goes, so a pre-empted seed resumes on any worker.

Pre-emptible GPU workers lose their local disk with the machine. So every resume checkpoint is recorded in
the run root (for a gs:// run: uploaded to the bucket, then added to the manifest) as it is written, together
with what it needs beside it: the best weights so far and the metrics so far. Old checkpoints are pruned in
the root as they are locally (``training.checkpoint.keep_last_n``).

A ``train-seed`` run on a fresh worker (an empty local mirror) stages the newest recorded checkpoint into
its mirror (:func:`stage_checkpoint`) and the training loop resumes from it, exactly as on the machine that
wrote it. ``attempts.json`` keeps, attempt by attempt, which flow run trained the seed, on which host, from
which recorded epoch it resumed and the last epoch it recorded: what a pre-emption cost is readable in the
run root and in the flow run's logs.

Order of the records at a checkpoint: best weights, metrics, then the checkpoint itself (the commit point),
then the attempt. A crash between them leaves the previous checkpoint as the newest recorded one; in
deterministic mode the epochs after it are trained again bit for bit, rewriting the same best weights.

Recording a file in the run manifest is the stage's business (which stage wrote it, the config hash it ran
under): training sits below the stages, so the train-seed stage hands :class:`SeedRecorder` a callback that
records one path (:data:`RecordFn`) instead of this module importing the stage.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from rtscore.storage import RunDir, RunLayout, StorageError, atomic_write_json, layout
from rtscore.tracking import FLOW_RUN_ENV

_log = logging.getLogger(__name__)

# Records one run-relative path in the run manifest as the stage that trains wrote it (for a gs:// run: uploaded
# first); what it returns is not used.
RecordFn = Callable[[str], object]


class SeedAttempt(BaseModel):
    """One run of a seed's training (a flow run on some worker)."""

    attempt: int = Field(..., ge=1, description="1 for the first run of the seed, then 2, 3, ...")
    flow_run_id: str | None = Field(None, description="The Prefect flow run that trained (none outside Prefect).")
    host: str = Field(..., description="The worker's host name.")
    pid: int = Field(..., description="The training process.")
    started: str = Field(..., description="UTC start time (ISO 8601).")
    resumed_from_epoch: int = Field(..., ge=0, description="Epoch of the checkpoint it resumed from (0: none).")
    last_epoch: int = Field(..., ge=0, description="Last epoch whose checkpoint this attempt recorded.")
    status: Literal["running", "interrupted", "completed"] = Field(
        ...,
        description="running: in progress (or it vanished, which the next attempt marks as interrupted); "
        "interrupted: a later attempt took over; completed: it finished the seed.",
    )

    @property
    def epochs_recorded(self) -> int:
        """Epochs this attempt trained and recorded (epochs it trained after its last checkpoint are lost)."""
        return self.last_epoch - self.resumed_from_epoch


class SeedAttempts(BaseModel):
    """``seeds/seed_<n>/attempts.json``."""

    seed: int = Field(..., description="Training seed.")
    attempts: list[SeedAttempt] = Field(default_factory=list, description="Every attempt, first to last.")

    def describe(self) -> str:
        """One line per attempt, e.g. ``attempt 2 (flow run ..., host gpu-7): epochs 5-12, completed``."""
        lines = []
        for a in self.attempts:
            who = f"flow run {a.flow_run_id}, " if a.flow_run_id else ""
            span = f"epochs {a.resumed_from_epoch + 1}-{a.last_epoch}" if a.epochs_recorded else "no epoch recorded"
            start = f"resumed from epoch {a.resumed_from_epoch}" if a.resumed_from_epoch else "from scratch"
            lines.append(f"attempt {a.attempt} ({who}host {a.host}): {start}; {span}; {a.status}")
        return "\n".join(lines)


def recorded_checkpoints(run: RunDir, seed: int) -> list[tuple[int, str]]:
    """The seed's resume checkpoints recorded in the run root, as (epoch, relative path), oldest first."""
    entry = RunLayout.RESUME_EPOCH.bind(seed=seed)
    found = [(int(m["epoch"]), rel) for rel in run.read_manifest().artifacts if (m := entry.match(rel)) is not None]
    return sorted(found)


def _local_newest_epoch(run: RunDir, seed: int) -> int:
    seed_dir = run.at(RunLayout.SEED_DIR, seed=seed)
    entry = RunLayout.RESUME_EPOCH.bind(seed=seed)
    epochs = [
        int(m["epoch"])
        for p in seed_dir.glob(layout.RESUME_GLOB)
        if (m := entry.match(p.relative_to(run.root).as_posix())) is not None
    ]
    return max(epochs, default=0)


def stage_checkpoint(run: RunDir, seed: int) -> int | None:
    """Bring the newest recorded checkpoint of ``seed`` into the run's local directory if it holds nothing as new.

    On the worker that wrote them the local files are at least as new (nothing to do). On a fresh worker (a
    gs:// run's empty mirror) the checkpoint, the best weights and the metrics it goes with are downloaded and
    verified, and the checkpoint becomes ``resume_latest.pth``, which the training loop resumes from. A
    recorded checkpoint that fails verification (a damaged object) is skipped for the next older one, with a
    warning naming it. Returns the epoch staged, None when there was nothing to stage.

    Raises:
        StorageError: Checkpoints are recorded but none of them can be staged.
    """
    recorded = recorded_checkpoints(run, seed)
    if not recorded or _local_newest_epoch(run, seed) >= recorded[-1][0]:
        return None
    problems: list[str] = []
    for epoch, rel in reversed(recorded):
        try:
            run.require(rel)
        except StorageError as err:
            problems.append(str(err))
            continue
        for companion in (RunLayout.BEST_WEIGHTS.at(seed=seed), RunLayout.SEED_METRICS.at(seed=seed)):
            run.fetch(companion)  # recorded with the checkpoint (best: once there is one)
        latest = run.at(RunLayout.RESUME_LATEST, seed=seed)
        tmp = latest.with_name(f".{latest.name}.{uuid.uuid4().hex[:8]}.tmp")
        shutil.copyfile(run.path(rel), tmp)
        tmp.replace(latest)
        if problems:
            _log.warning(f"{'; '.join(problems)}. Resuming seed {seed} from the recorded epoch {epoch} instead.")
        _log.info(f"seed {seed}: staged the checkpoint of epoch {epoch} recorded in {run.uri}")
        return epoch
    raise StorageError(
        f"seed {seed}: no recorded resume checkpoint can be staged from {run.uri}: {'; '.join(problems)}. "
        "Re-run with --fresh to start this seed over."
    )


def forget_seed(run: RunDir, seed: int) -> None:
    """Delete what a seed's earlier training recorded (a fresh start must never resume from it later)."""
    rels = [rel for _, rel in recorded_checkpoints(run, seed)]
    rels += [e.at(seed=seed) for e in (RunLayout.BEST_WEIGHTS, RunLayout.SEED_METRICS, RunLayout.SEED_ATTEMPTS)]
    recorded = run.read_manifest().artifacts
    for rel in rels:
        if rel in recorded:
            run.delete(rel)


class SeedRecorder:
    """Records a seed's checkpoints, best weights, metrics and attempts in the run root as training goes.

    The training loop calls :meth:`started` once it knows its first epoch and :meth:`checkpoint_saved` after
    each resume checkpoint; the stage calls :meth:`finished` once the seed's outputs are written. ``record``
    records a path in the run manifest (the stage's); ``keep_last_n`` is ``training.checkpoint.keep_last_n``.
    """

    def __init__(self, run: RunDir, seed: int, *, record: RecordFn, keep_last_n: int) -> None:
        self.run, self.seed, self.record, self.keep_last_n = run, seed, record, keep_last_n
        self.attempts = read_attempts(run, seed)
        self.current: SeedAttempt | None = None

    def started(self, first_epoch: int) -> None:
        for a in self.attempts.attempts:
            if a.status == "running":  # its worker vanished (or was killed): this attempt takes over
                a.status = "interrupted"
        resumed = first_epoch - 1
        self.current = SeedAttempt(
            attempt=len(self.attempts.attempts) + 1,
            flow_run_id=os.environ.get(FLOW_RUN_ENV),
            host=socket.gethostname(),
            pid=os.getpid(),
            started=datetime.now(UTC).isoformat(timespec="seconds"),
            resumed_from_epoch=resumed,
            last_epoch=resumed,
            status="running",
        )
        self.attempts.attempts.append(self.current)
        how = f"resuming from the checkpoint of epoch {resumed}" if resumed else "from scratch"
        _log.info(f"seed {self.seed}: attempt {self.current.attempt}, {how}")
        self._record_attempts()

    def checkpoint_saved(self, epoch: int) -> None:
        seed = self.seed
        for entry in (RunLayout.BEST_WEIGHTS, RunLayout.SEED_METRICS):
            if self.run.at(entry, seed=seed).exists():
                self.record(entry.at(seed=seed))
        self.record(RunLayout.RESUME_EPOCH.at(seed=seed, epoch=epoch))  # the commit
        if self.current is not None:
            self.current.last_epoch = epoch
            self._record_attempts()
        for _, rel in recorded_checkpoints(self.run, seed)[: -self.keep_last_n]:
            self.run.delete(rel)  # pruned in the root as locally

    def set_aside(self) -> None:
        forget_seed(self.run, self.seed)  # the local copies are set aside; no record may be staged again

    def finished(self) -> None:
        if self.current is not None:
            self.current.status = "completed"
            self._record_attempts()

    def _record_attempts(self) -> None:
        rel = RunLayout.SEED_ATTEMPTS.at(seed=self.seed)
        atomic_write_json(self.run.path(rel), self.attempts.model_dump(mode="json"))
        self.record(rel)


def read_attempts(run: RunDir, seed: int) -> SeedAttempts:
    """The seed's ``attempts.json`` as recorded (staged from the root first); empty when there is none."""
    rel = RunLayout.SEED_ATTEMPTS.at(seed=seed)
    run.fetch(rel)
    path = run.path(rel)
    if not path.is_file():
        return SeedAttempts(seed=seed)
    try:
        return SeedAttempts.model_validate_json(path.read_text())
    except (ValidationError, ValueError) as err:
        _log.warning(f"{path} is unreadable ({err}); the attempts are counted from here on")
        return SeedAttempts(seed=seed)
