"""Distributed execution: one child flow run per work item on a deployment (a GPU work pool), idempotently.

A distributed pipeline fans three stages out this way (:func:`fan_out`): ``train-seed`` and ``logit-cache``
(one run per seed), and ``evaluate-test`` (one run over all seeds). Each child run is started with
``run_deployment`` and an idempotency key ``rts-pipeline/<parent flow run id>/<stage>/<item>[/attempt-N]``
(:func:`idempotency_key`), so a retry of the pipeline flow run (same id) finds the runs it started the first
time instead of creating new ones: a completed child is reused, a running one is waited for, and only an item
whose earlier run ended Failed, Crashed or Cancelled gets a new run, under the next attempt's key.

While the parent waits, a child that ends **Crashed** (its worker vanished: a pre-empted VM, a killed pod, an
out-of-memory kill; infrastructure, not code) is re-submitted under the next attempt key, up to
``DistributedParams.max_attempts`` runs per item in this parent attempt; the new run resumes from what the
earlier one recorded in the run root. A child that ends **Failed** (its code raised) or **Cancelled** is not
re-submitted: the same code on the same inputs would fail again, so the parent fails naming it (after the other
children finished, whose work a retry then reuses). Every attempt is logged, and the parent flow run gets a
table artifact ``<stage>-attempts`` (item, attempt, flow run, final state).

Results come back through the run directory, not through Prefect results: each child's stage records its
artifacts in the manifest (``RunLayout``), which the parent reads once the child completed
(:func:`read_train_result`, :func:`read_logit_caches`, :func:`read_test_result`). No result storage has to be
shared between the pools.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, cast

from prefect.artifacts import create_table_artifact
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger, get_run_logger
from pydantic import BaseModel, ValidationError

from flows.params import DistributedParams, LogitCacheParams, PipelineParams, SeedStageParams, TrainSeedParams
from flows.ui import artifact_key
from rtscore.errors import PipelineError
from rtscore.evaluation import TestReport
from rtscore.stages import ArtifactRef, TestResult, TrainResult
from rtscore.stages.evaluate_test import SPEC as EVALUATE_TEST_SPEC
from rtscore.stages.logit_cache import SPEC as LOGIT_CACHE_SPEC
from rtscore.stages.seed_records import read_attempts
from rtscore.stages.train import SEED_OUTPUTS
from rtscore.stages.train import SPEC as TRAIN_SEED_SPEC
from rtscore.storage import RunDir, RunLayout, StorageError, absolute_location
from rtscore.train.result import read_seed_summary

MAX_KEYS = 100  # runs per item over all retries of one pipeline flow run (a guard against a runaway loop)
TRAIN_SEED = TRAIN_SEED_SPEC.name  # the stage whose records in the manifest are a seed's artifacts
LOGIT_CACHE = LOGIT_CACHE_SPEC.name
EVALUATE_TEST = EVALUATE_TEST_SPEC.name
ALL_SEEDS = "all"  # the work item of a stage that runs once over every seed (evaluate-test)


class FanOutError(PipelineError):
    """A child flow run failed, crashed too often, or did not finish in time."""


def _logger() -> Any:
    try:
        return get_run_logger()
    except MissingContextError:  # called outside a flow run (tests, scripts)
        return get_logger("rts.fanout")


def idempotency_key(parent_flow_run_id: str, stage: str, item: int | str, attempt: int = 0) -> str:
    """The key of a child run: one run per (pipeline flow run, stage, work item, attempt)."""
    key = f"rts-pipeline/{parent_flow_run_id}/{stage}/{item}"
    return key if attempt == 0 else f"{key}/attempt-{attempt}"


absolute = absolute_location  # children may run in another working directory


@dataclass(frozen=True)
class Child:
    """One work item of a fan-out: the run's parameters and how the user sees it."""

    item: str  # part of the idempotency key: the seed, or ALL_SEEDS
    label: str  # in logs and errors: "seed 42", "seeds 42, 43"
    run_name: str  # the flow run's name (attempts after the first get "-retry-<n>")
    params: BaseModel


@dataclass
class Attempt:
    """One child flow run of an item, as the attempts table shows it."""

    item: str
    label: str
    attempt: int  # 0: the first run of the item; n: the run under key ".../attempt-n"
    run: FlowRun
    note: str = ""

    def row(self) -> dict[str, Any]:
        state = self.run.state
        return {
            "item": self.label,
            "attempt": self.attempt + 1,
            "flow run": self.run.name,
            "flow run id": str(self.run.id),
            "final state": state.type.value if state is not None and state.is_final() else "not final",
            "note": self.note,
        }


@dataclass
class _Item:
    child: Child
    attempt: int
    run: FlowRun
    started: int = 1  # runs of this item this parent attempt started or re-attached to
    history: list[Attempt] = field(default_factory=list)


def _submit(
    stage: str,
    deployment: str,
    parent: str,
    child: Child,
    dist: DistributedParams,
    first: int,
    tags: list[str] | None,
    log: list[Attempt],
) -> tuple[int, FlowRun]:
    """Start (or find) the item's run under the first key from ``first`` on whose run did not end unsuccessfully
    (a run of an earlier parent attempt that failed, crashed or was cancelled is passed over)."""
    logger = _logger()
    for attempt in range(first, MAX_KEYS):
        # Prefect types run_deployment (sync-compatible) as `FlowRun | Coroutine[..., FlowRun]`; called sync: FlowRun.
        run = cast(
            FlowRun,
            run_deployment(
                deployment,
                parameters={"params": child.params.model_dump(mode="json")},
                timeout=0,  # start every item first, then wait for all
                idempotency_key=idempotency_key(parent, stage, child.item, attempt),
                flow_run_name=child.run_name if attempt == 0 else f"{child.run_name}-retry-{attempt}",
                tags=tags,
                job_variables=dist.job_variables or None,
            ),
        )
        state = run.state
        if state is not None and state.is_final() and not state.is_completed():
            logger.info(
                f"{stage} {child.label}: attempt {attempt + 1}, run {run.name} ({run.id}) of an earlier attempt "
                f"of this pipeline run ended {state.type.value}; starting the next attempt"
            )
            log.append(Attempt(child.item, child.label, attempt, run, "earlier pipeline attempt"))
            continue
        what = "reusing completed" if state is not None and state.is_completed() else "waiting for"
        logger.info(f"{stage} {child.label}: attempt {attempt + 1}, {what} run {run.name} ({run.id}) on {deployment}")
        return attempt, run
    raise FanOutError(f"{stage} {child.label}: {MAX_KEYS} runs of {deployment} did not complete; giving up")


def _read_run(client: Any, run: FlowRun) -> FlowRun:
    return cast(FlowRun, client.read_flow_run(run.id))


def fan_out(
    stage: str,
    deployment: str,
    parent_flow_run_id: str,
    children: list[Child],
    dist: DistributedParams,
    *,
    tags: list[str] | None = None,
) -> dict[str, FlowRun]:
    """Run one flow run of ``deployment`` per child (idempotently), wait for all, re-submit crashed ones.

    Returns the completed run per item. Raises FanOutError naming every item whose run failed, was cancelled,
    crashed ``dist.max_attempts`` times, or had not finished after ``dist.timeout_s``; the attempts table is
    published on the parent flow run either way.
    """
    from prefect.client.orchestration import get_client

    logger = _logger()
    log: list[Attempt] = []
    items: dict[str, _Item] = {}
    done: dict[str, _Item] = {}
    try:
        for child in children:
            attempt, run = _submit(stage, deployment, parent_flow_run_id, child, dist, 0, tags, log)
            items[child.item] = _Item(child, attempt, run)
        deadline = time.monotonic() + dist.timeout_s
        pending = dict(items)
        with get_client(sync_client=True) as client:
            while pending:
                for key, it in list(pending.items()):
                    it.run = _read_run(client, it.run)
                    state = it.run.state
                    if state is None or not state.is_final():
                        continue
                    if state.is_crashed() and it.started < dist.max_attempts:
                        log.append(Attempt(key, it.child.label, it.attempt, it.run, "crashed: re-submitted"))
                        logger.warning(
                            f"{stage} {it.child.label}: run {it.run.name} ({it.run.id}) crashed "
                            f"({state.message or 'no message'}); re-submitting as attempt {it.attempt + 2} "
                            f"({it.started + 1} of at most {dist.max_attempts} in this pipeline attempt)"
                        )
                        it.attempt, it.run = _submit(
                            stage, deployment, parent_flow_run_id, it.child, dist, it.attempt + 1, tags, log
                        )
                        it.started += 1
                        continue
                    done[key] = pending.pop(key)
                    logger.info(
                        f"{stage} {it.child.label}: attempt {it.attempt + 1}, run {it.run.name} ({it.run.id}) "
                        f"ended {state.type.value}"
                    )
                if not pending or time.monotonic() >= deadline:
                    break
                time.sleep(min(dist.poll_interval_s, max(0.0, deadline - time.monotonic())))
        problems = [_problem(stage, it, dist) for it in done.values() if not _completed(it.run)]
        problems += [
            f"{stage} {it.child.label}: run {it.run.name} ({it.run.id}) still not finished after "
            f"{dist.timeout_s:.0f} s (a retry of the pipeline run re-attaches to it)"
            for it in pending.values()
        ]
        if problems:
            raise FanOutError(f"distributed {stage} failed:\n  " + "\n  ".join(problems))
        return {key: it.run for key, it in done.items()}
    finally:
        log += [Attempt(k, it.child.label, it.attempt, it.run) for k, it in items.items()]
        _publish_attempts(stage, log)


def _completed(run: FlowRun) -> bool:
    return run.state is not None and run.state.is_completed()


def _problem(stage: str, it: _Item, dist: DistributedParams) -> str:
    state = it.run.state
    kind = state.type.value if state is not None else "?"
    text = f"{stage} {it.child.label}: run {it.run.name} ({it.run.id}) ended {kind}"
    if state is not None and state.message:
        text += f": {state.message}"
    if state is not None and state.is_crashed():
        text += f" (crashed {it.started} times, distributed.max_attempts is {dist.max_attempts})"
    return text


def _publish_attempts(stage: str, log: list[Attempt]) -> None:
    """The attempts table on the parent flow run; never fails the fan-out (e.g. outside a flow run)."""
    rows = [a.row() for a in sorted(log, key=lambda a: (a.item, a.attempt))]
    try:
        create_table_artifact(
            key=artifact_key(stage, "attempts"),
            table=rows,
            description=f"{stage}: the child flow runs of each item (attempt 1 is the first run)",
        )
    except Exception as err:  # a summary never fails a stage
        _logger().warning(f"could not publish the {stage} attempts table: {err}")


# ------------------------------------------------------------------------------------ the stages' children
def train_child(params: PipelineParams, seed: int, parent_mlflow_run: str | None) -> Child:
    child = TrainSeedParams(
        config=absolute(params.config),
        run_dir=absolute(params.run_dir),
        deterministic=params.deterministic,
        seed=seed,
        fresh=params.refresh,
        parent_run_id=parent_mlflow_run,
    )
    return Child(str(seed), f"seed {seed}", f"train-seed-{seed}", child)


def _stage_fields(params: PipelineParams) -> dict[str, Any]:
    """What every after-training child shares with the pipeline run (paths made absolute for the workers)."""
    return {
        "config": absolute(params.config),
        "run_dir": absolute(params.run_dir),
        "deterministic": params.deterministic,
        "refresh": params.refresh,
    }


def logit_cache_child(params: PipelineParams, seed: int) -> Child:
    child = LogitCacheParams(**_stage_fields(params), seed=seed)
    return Child(str(seed), f"seed {seed}", f"logit-cache-{seed}", child)


def evaluate_test_child(params: PipelineParams, seeds: list[int]) -> Child:
    child = SeedStageParams(**_stage_fields(params), seeds=seeds)
    return Child(ALL_SEEDS, "seeds " + ", ".join(map(str, seeds)), "evaluate-test", child)


# ------------------------------------------------------------------------------------ results from the run dir
def _verified(run: RunDir, what: str, rels: list[str]) -> None:
    for rel in rels:
        try:
            run.verify(rel)
        except StorageError as err:
            raise FanOutError(f"{what} completed but its artifacts are not in the run: {err}") from None


def _recorded(run: RunDir, stage: str, select: Any) -> list[ArtifactRef]:
    """The manifest's records of ``stage`` whose path ``select`` accepts, as the stage task would return them."""
    return [
        ArtifactRef(
            uri=e.uri if run.remote else str(run.path(rel)), path=rel, sha256=e.sha256, bytes=e.bytes, stage=e.stage
        )
        for rel, e in sorted(run.read_manifest().artifacts.items())
        if e.stage == stage and select(rel)
    ]


def read_train_result(run_dir: str, seed: int) -> TrainResult:
    """A trained seed's result, from what its train-seed stage recorded in the run directory.

    The weights and the summary are checked against the manifest (for a gs:// run: staged into this
    worker's mirror and verified there, where calibrate reads them next).
    """
    run = RunDir(run_dir)
    summary = RunLayout.SEED_SUMMARY.at(seed=seed)
    _verified(run, f"seed {seed}", [RunLayout.BEST_WEIGHTS.at(seed=seed), summary])
    try:
        result = read_seed_summary(run.path(summary)).to_result(str(run.at(RunLayout.SEED_DIR, seed=seed)))
    except StorageError as err:
        raise FanOutError(f"seed {seed} completed but its summary cannot be read: {err}") from None
    if result.seed != seed:
        raise FanOutError(f"seed {seed} completed but {run.path(summary)} is the summary of seed {result.seed}")
    outputs = {entry.at(seed=seed) for entry in SEED_OUTPUTS}  # not the rotating checkpoints, pruned later
    return TrainResult(
        result=result,
        artifacts=_recorded(run, TRAIN_SEED, lambda rel: rel in outputs),
        attempts=read_attempts(run, seed),
    )


def read_logit_caches(run_dir: str, seeds: list[int]) -> list[ArtifactRef]:
    """Each seed's recorded logit cache (what the logit-cache runs wrote), in the order of ``seeds``.

    Only the records are read: calibrate verifies the caches when it requires them (a gs:// cache is staged
    into this worker's mirror then)."""
    run = RunDir(run_dir)
    refs = {r.path: r for r in _recorded(run, LOGIT_CACHE, lambda rel: True)}
    missing = [s for s in seeds if RunLayout.LOGIT_CACHE.at(seed=s) not in refs]
    if missing:
        raise FanOutError(
            f"logit-cache of seeds {missing} completed but {run.uri} records no "
            f"{RunLayout.LOGIT_CACHE.at(seed=missing[0])} by stage {LOGIT_CACHE}"
        )
    return [refs[RunLayout.LOGIT_CACHE.at(seed=s)] for s in seeds]


def read_test_result(run_dir: str, seeds: list[int]) -> TestResult:
    """The test evaluation's result, from ``evaluation/test_report.json`` as the evaluate-test run recorded it."""
    run = RunDir(run_dir)
    rel = RunLayout.TEST_REPORT.at()
    _verified(run, "evaluate-test", [rel])
    path = run.path(rel)
    try:
        report = TestReport.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError) as err:
        raise FanOutError(f"evaluate-test completed but {path} cannot be read as a test report: {err}") from None
    if sorted(report.seeds) != sorted(seeds):
        raise FanOutError(f"evaluate-test completed but {path} reports seeds {report.seeds}, not {seeds}")
    return TestResult(report=report, artifacts=_recorded(run, EVALUATE_TEST, lambda rel: True))


# ------------------------------------------------------------------------------------ the pipeline's fan-outs
def distributed_train(
    params: PipelineParams, parent_flow_run_id: str, seeds: list[int], parent_mlflow_run: str | None
) -> list[TrainResult]:
    """One train-seed run per seed, wait for all, their results from the run directory."""
    dist = params.distributed
    children = [train_child(params, s, parent_mlflow_run) for s in seeds]
    fan_out(TRAIN_SEED, dist.deployment, parent_flow_run_id, children, dist, tags=["rts-seed"])
    return [read_train_result(params.run_dir, seed) for seed in seeds]


def distributed_logit_caches(params: PipelineParams, parent_flow_run_id: str, seeds: list[int]) -> list[ArtifactRef]:
    """One logit-cache run per seed, wait for all, the recorded caches."""
    dist = params.distributed
    children = [logit_cache_child(params, s) for s in seeds]
    fan_out(LOGIT_CACHE, dist.logit_cache_deployment, parent_flow_run_id, children, dist, tags=["rts-seed"])
    return read_logit_caches(params.run_dir, seeds)


def distributed_evaluate_test(params: PipelineParams, parent_flow_run_id: str, seeds: list[int]) -> TestResult:
    """One evaluate-test run over all seeds, wait for it, its report from the run directory."""
    dist = params.distributed
    children = [evaluate_test_child(params, seeds)]
    fan_out(EVALUATE_TEST, dist.evaluate_test_deployment, parent_flow_run_id, children, dist)
    return read_test_result(params.run_dir, seeds)
