"""Distributed execution: one child flow run per work item on a deployment (a GPU work pool), idempotently.

A distributed pipeline fans three stages out this way (:func:`fan_out`): ``train-seed`` and ``logit-cache``
(one run per seed), and ``evaluate-test`` (one run over all seeds). Each child run is started with
``run_deployment`` and an idempotency key ``rts-pipeline/<parent flow run id>/<stage>/<item>[/attempt-N]``
(:func:`idempotency_key`), so a retry of the pipeline flow run (same id) finds the runs it started the first
time instead of creating new ones: a completed child is reused, a running one is waited for, and only an item
whose earlier run ended Failed, Crashed or Cancelled gets a new run, under the next attempt's key.

While the parent waits, a child that ends **Crashed** (its worker vanished: a pre-empted VM, a killed pod, an
out-of-memory kill; infrastructure, not code) is re-submitted under the next attempt key, up to ``max_attempts``
runs per item in this parent attempt (:class:`flows.params.FanOutSettings`); the new run resumes from what the
earlier one recorded in the run root. A child that ends **Failed** (its code raised) or **Cancelled** is not
re-submitted: the same code on the same inputs would fail again, so the parent fails naming it (after the other
children finished, whose work a retry then reuses). Every attempt is logged, and the parent flow run gets a
table artifact ``<stage>-attempts`` (item, attempt, flow run, final state).

Results come back through the run directory, not through Prefect results: each child's stage records its
artifacts in the manifest (``RunLayout``), which the parent reads once the child completed, through the stage's
own reader of what it recorded (``rtscore.stages.recorded_train_result``, ``recorded_logit_caches``,
``recorded_test_result``). No result storage has to be shared between the pools.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar, cast

from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger, get_run_logger
from pydantic import BaseModel, ConfigDict, Field

from flows.common import stage_run_name
from flows.form import FormModel
from flows.params import (
    FanOutSettings,
    LogitCacheParams,
    PipelineParams,
    SeedStageParams,
    TrainSeedParams,
    derived,
)
from flows.ui import artifact_key, create_table_artifact, in_a_run
from rtscore.errors import PipelineError
from rtscore.stages import (
    ArtifactRef,
    TestResult,
    TrainResult,
    recorded_logit_caches,
    recorded_test_result,
    recorded_train_result,
)
from rtscore.stages.evaluate_test import SPEC as EVALUATE_TEST_SPEC
from rtscore.stages.logit_cache import SPEC as LOGIT_CACHE_SPEC
from rtscore.stages.train import SPEC as TRAIN_SEED_SPEC
from rtscore.storage import RunDir, absolute_location

T = TypeVar("T")

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
    params: FormModel  # the child flow's parameters


class AttemptRow(BaseModel):
    """A row of the attempts table (the column names are the fields' aliases)."""

    model_config = ConfigDict(populate_by_name=True)

    item: str = Field(..., description="The work item: seed 42, seeds 42, 43, chunk 3.")
    attempt: int = Field(..., description="1 for the item's first run, then 2, 3, ...")
    flow_run: str = Field(..., alias="flow run", description="The child flow run's name.")
    flow_run_id: str = Field(..., alias="flow run id", description="The child flow run's id.")
    final_state: str = Field(..., alias="final state", description="Its final state, or 'not final'.")
    note: str = Field("", description="Why the run was passed over or re-submitted.")


@dataclass
class Attempt:
    """One child flow run of an item, as the attempts table shows it."""

    item: str
    label: str
    attempt: int  # 0: the first run of the item; n: the run under key ".../attempt-n"
    run: FlowRun
    note: str = ""

    def row(self) -> AttemptRow:
        state = self.run.state
        return AttemptRow(
            item=self.label,
            attempt=self.attempt + 1,
            flow_run=self.run.name,
            flow_run_id=str(self.run.id),
            final_state=state.type.value if state is not None and state.is_final() else "not final",
            note=self.note,
        )


@dataclass
class _Item:
    child: Child
    attempt: int
    run: FlowRun
    started: int = 1  # runs of this item this parent attempt started or re-attached to


def _submit(
    stage: str,
    deployment: str,
    parent: str,
    child: Child,
    first: int,
    *,
    dist: FanOutSettings,
    tags: list[str] | None,
    log: list[Attempt],
) -> tuple[int, FlowRun]:
    """Start (or find) the item's run under the first key from ``first`` on whose run did not end unsuccessfully
    (a run of an earlier parent attempt that failed, crashed or was cancelled is passed over)."""
    logger = _logger()
    for attempt in range(first, MAX_KEYS):
        key = idempotency_key(parent, stage, child.item, attempt)
        # Prefect types run_deployment (sync-compatible) as `FlowRun | Coroutine[..., FlowRun]`; called sync: FlowRun.
        start = partial(
            run_deployment,
            deployment,
            parameters={"params": child.params.model_dump(mode="json")},
            timeout=0,  # start every item first, then wait for all
            idempotency_key=key,
            flow_run_name=child.run_name if attempt == 0 else f"{child.run_name}-retry-{attempt}",
            tags=tags,
            job_variables=dist.job_variables or None,
        )
        run = cast(FlowRun, server_call(f"{stage} {child.label}: starting its run (key {key})", start))
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


READ_PAGE = 200  # flow runs read per API call while waiting (the server's default page limit)
SERVER_RETRIES = 6  # tries of an API call that met a transient server error: waits of 2, 4, 8, 16, 30 s between


def server_call(what: str, call: Callable[[], T]) -> T:
    """``call()`` (a request to the Prefect API), tried again after a transient server error (a 5xx or 429 the
    client's own retries did not get past, a dropped connection): a coordinator of thousands of runs outlives a
    minute of an overloaded server (SQLite: "database is locked") instead of failing the campaign. Starting a run
    again is safe: its idempotency key returns the run the first try may have created. Other errors are raised."""
    for tries in range(1, SERVER_RETRIES + 1):
        try:
            return call()
        except Exception as err:
            if tries == SERVER_RETRIES or not _transient_server_error(err):
                raise
            wait = min(30.0, 2.0**tries)
            _logger().warning(f"{what}: {type(err).__name__}: {err}; try {tries + 1} of {SERVER_RETRIES} in {wait:g} s")
            time.sleep(wait)
    raise AssertionError("unreachable")  # the last try returned or raised


def _transient_server_error(err: BaseException) -> bool:
    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    if isinstance(err, PrefectHTTPStatusError):
        code = err.response.status_code
        return code >= 500 or code == 429
    return isinstance(err, httpx.TransportError)


def _read_runs(client: Any, runs: list[FlowRun]) -> dict[Any, FlowRun]:
    """The current state of ``runs``, by id: one API call per :data:`READ_PAGE` runs, not one per run, so a poll of
    K pending chunk runs costs K / 200 requests (a campaign of 117,000 quads has ~2,340). A run the server no longer
    returns is read on its own (its error, if any, is the server's)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    out: dict[Any, FlowRun] = {}
    for k in range(0, len(runs), READ_PAGE):
        ids = [r.id for r in runs[k : k + READ_PAGE]]
        page = client.read_flow_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=ids)), limit=len(ids))
        out.update({r.id: r for r in page})
    for r in runs:
        if r.id not in out:
            out[r.id] = cast(FlowRun, client.read_flow_run(r.id))
    return out


def fan_out(
    stage: str,
    deployment: str,
    parent_flow_run_id: str,
    children: list[Child],
    dist: FanOutSettings,
    *,
    tags: list[str] | None = None,
) -> dict[str, FlowRun]:
    """Run one flow run of ``deployment`` per child (idempotently), wait for all, re-submit crashed ones.

    Returns the completed run per item. Raises FanOutError naming every item whose run failed, was cancelled,
    crashed ``dist.max_attempts`` times, or had not finished after ``dist.timeout_s``; the attempts table is
    published on the parent flow run either way.
    """
    log: list[Attempt] = []
    items: dict[str, _Item] = {}
    submit = partial(_submit, stage, deployment, parent_flow_run_id, dist=dist, tags=tags, log=log)
    try:
        for child in children:
            attempt, run = submit(child, 0)
            items[child.item] = _Item(child, attempt, run)
        done, pending = _wait(stage, dict(items), dist, submit, log)
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


def _wait(
    stage: str,
    pending: dict[str, _Item],
    dist: FanOutSettings,
    submit: Callable[[Child, int], tuple[int, FlowRun]],
    log: list[Attempt],
) -> tuple[dict[str, _Item], dict[str, _Item]]:
    """Poll the items' runs until all are final or ``dist.timeout_s`` passed, re-submitting a crashed run while
    the item has attempts left. Returns (the items whose run ended, the items still going)."""
    from prefect.client.orchestration import get_client

    logger = _logger()
    done: dict[str, _Item] = {}
    deadline = time.monotonic() + dist.timeout_s
    with get_client(sync_client=True) as client:
        while pending:
            runs = [it.run for it in pending.values()]
            now = server_call(f"{stage}: reading {len(runs)} run state(s)", partial(_read_runs, client, runs))
            for key, it in list(pending.items()):
                it.run = now[it.run.id]
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
                    it.attempt, it.run = submit(it.child, it.attempt + 1)
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
    return done, pending


def _completed(run: FlowRun) -> bool:
    return run.state is not None and run.state.is_completed()


def _problem(stage: str, it: _Item, dist: FanOutSettings) -> str:
    state = it.run.state
    kind = state.type.value if state is not None else "?"
    text = f"{stage} {it.child.label}: run {it.run.name} ({it.run.id}) ended {kind}"
    if state is not None and state.message:
        text += f": {state.message}"
    if state is not None and state.is_crashed():
        text += f" (crashed {it.started} times, distributed.max_attempts is {dist.max_attempts})"
    return text


def _publish_attempts(stage: str, log: list[Attempt]) -> None:
    """The attempts table on the parent flow run (none outside a run: see :func:`flows.ui.in_a_run`); never fails
    the fan-out."""
    if not in_a_run():
        return
    rows = [a.row().model_dump(by_alias=True) for a in sorted(log, key=lambda a: (a.item, a.attempt))]
    try:
        create_table_artifact(
            key=artifact_key(stage, "attempts"),
            table=rows,
            description=f"{stage}: the child flow runs of each item (attempt 1 is the first run)",
        )
    except Exception as err:  # a summary never fails a stage
        _logger().warning(f"could not publish the {stage} attempts table: {err}")


# ------------------------------------------------------------------------------------ the stages' children
# Each child's parameters are derived from the pipeline's (flows.params.derived: every field they share), the
# paths made absolute: the workers may start in another directory.
def _located(params: PipelineParams) -> dict[str, str]:
    return {"config": absolute(params.config), "run_dir": absolute(params.run_dir)}


def train_child(params: PipelineParams, seed: int, parent_mlflow_run: str | None) -> Child:
    child = derived(
        TrainSeedParams, params, **_located(params), seed=seed, fresh=params.refresh, parent_run_id=parent_mlflow_run
    )
    return Child(str(seed), f"seed {seed}", stage_run_name(TRAIN_SEED_SPEC, child), child)


def logit_cache_child(params: PipelineParams, seed: int) -> Child:
    child = derived(LogitCacheParams, params, **_located(params), seed=seed)
    return Child(str(seed), f"seed {seed}", stage_run_name(LOGIT_CACHE_SPEC, child), child)


def evaluate_test_child(params: PipelineParams, seeds: list[int]) -> Child:
    child = derived(SeedStageParams, params, **_located(params), seeds=seeds)
    return Child(ALL_SEEDS, "seeds " + ", ".join(map(str, seeds)), stage_run_name(EVALUATE_TEST_SPEC, child), child)


# ------------------------------------------------------------------------------------ results from the run dir
def read_recorded(what: str, read: Callable[[], T]) -> T:
    """A completed child's result, read back from what its stage recorded in the run directory; a result that is
    not there (or not the one expected) fails the fan-out naming the child."""
    try:
        return read()
    except PipelineError as err:
        raise FanOutError(f"{what} completed but {err}") from None


# ------------------------------------------------------------------------------------ the pipeline's fan-outs
def distributed_train(
    params: PipelineParams, parent_flow_run_id: str, seeds: list[int], parent_mlflow_run: str | None
) -> list[TrainResult]:
    """One train-seed run per seed, wait for all, their results from the run directory."""
    dist = params.distributed
    children = [train_child(params, s, parent_mlflow_run) for s in seeds]
    fan_out(TRAIN_SEED, dist.deployment, parent_flow_run_id, children, dist, tags=["rts-seed"])
    run = RunDir(params.run_dir)
    return [read_recorded(f"seed {seed}", partial(recorded_train_result, run, seed)) for seed in seeds]


def distributed_logit_caches(params: PipelineParams, parent_flow_run_id: str, seeds: list[int]) -> list[ArtifactRef]:
    """One logit-cache run per seed, wait for all, the recorded caches."""
    dist = params.distributed
    children = [logit_cache_child(params, s) for s in seeds]
    fan_out(LOGIT_CACHE, dist.logit_cache_deployment, parent_flow_run_id, children, dist, tags=["rts-seed"])
    run = RunDir(params.run_dir)
    return read_recorded(f"logit-cache of seeds {seeds}", partial(recorded_logit_caches, run, seeds))


def distributed_evaluate_test(params: PipelineParams, parent_flow_run_id: str, seeds: list[int]) -> TestResult:
    """One evaluate-test run over all seeds, wait for it, its report from the run directory."""
    dist = params.distributed
    children = [evaluate_test_child(params, seeds)]
    fan_out(EVALUATE_TEST, dist.evaluate_test_deployment, parent_flow_run_id, children, dist)
    run = RunDir(params.run_dir)
    return read_recorded(EVALUATE_TEST, partial(recorded_test_result, run, seeds))
