"""Distributed training: one train-seed flow run per seed on a deployment (a GPU work pool), idempotently.

The pipeline flow starts each seed's run with ``run_deployment`` and an idempotency key derived from its own
flow run id and the seed. A retry of the pipeline flow run (same id) therefore finds the runs it started the
first time instead of creating new ones: a completed seed is reused, a running one is waited for. Only a seed
whose earlier run failed, crashed or was cancelled gets a new run, under the next attempt's key.

Results come back through the run directory, not through Prefect results: the train-seed stage records
the seed's weights, ``run_summary.json`` ... (``RunLayout.SEED_*``) in the manifest, which the parent reads
once the child run has completed. No result storage has to be shared between the pools.
"""

from __future__ import annotations

import time
from typing import Any, cast

from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.exceptions import MissingContextError
from prefect.logging import get_logger, get_run_logger

from flows.params import DistributedParams, PipelineParams, TrainSeedParams
from rtscore.errors import PipelineError
from rtscore.stages import ArtifactRef, TrainResult
from rtscore.stages.train import SPEC as TRAIN_SEED_SPEC
from rtscore.storage import RunDir, RunLayout, StorageError, absolute_location
from rtscore.train.result import read_seed_summary

MAX_ATTEMPTS = 100  # new runs per seed over all retries of one pipeline flow run
TRAIN_SEED = TRAIN_SEED_SPEC.name  # the stage whose records in the manifest are a seed's artifacts


class FanOutError(PipelineError):
    """A seed's train-seed flow run failed, or did not finish in time."""


def _logger() -> Any:
    try:
        return get_run_logger()
    except MissingContextError:  # called outside a flow run (tests, scripts)
        return get_logger("rts.fanout")


def idempotency_key(parent_flow_run_id: str, seed: int, attempt: int = 0) -> str:
    """The key of a seed's train-seed run: one run per (pipeline flow run, seed, attempt)."""
    key = f"rts-pipeline/{parent_flow_run_id}/train-seed/{seed}"
    return key if attempt == 0 else f"{key}/attempt-{attempt}"


absolute = absolute_location  # children may run in another working directory


def child_params(params: PipelineParams, seed: int, parent_mlflow_run: str | None) -> TrainSeedParams:
    return TrainSeedParams(
        config=absolute(params.config),
        run_dir=absolute(params.run_dir),
        deterministic=params.deterministic,
        seed=seed,
        fresh=params.refresh,
        parent_run_id=parent_mlflow_run,
    )


def submit_seed(
    dist: DistributedParams, parent_flow_run_id: str, child: TrainSeedParams, *, tags: list[str] | None = None
) -> FlowRun:
    """Start (or find) the seed's train-seed flow run; a run of an earlier attempt that failed is replaced."""
    logger = _logger()
    seed = child.seed
    if seed is None:  # the idempotency key needs the seed itself, not "training.seed of the config"
        raise FanOutError("a distributed train-seed run must name its seed")
    for attempt in range(MAX_ATTEMPTS):
        # Prefect types run_deployment (sync-compatible) as `FlowRun | Coroutine[..., FlowRun]`; called sync: FlowRun.
        run = cast(
            FlowRun,
            run_deployment(
                dist.deployment,
                parameters={"params": child.model_dump(mode="json")},
                timeout=0,  # start every seed first, then wait for all (wait_for_runs)
                idempotency_key=idempotency_key(parent_flow_run_id, seed, attempt),
                flow_run_name=f"train-seed-{seed}",
                tags=tags,
                job_variables=dist.job_variables or None,
            ),
        )
        state = run.state
        if state is not None and state.is_final() and not state.is_completed():
            logger.info(f"seed {seed}: run {run.name} of an earlier attempt ended {state.type.value}; new run")
            continue
        if state is not None and state.is_completed():
            logger.info(f"seed {seed}: reusing completed run {run.name} ({run.id}) of an earlier attempt")
        return run
    raise FanOutError(f"seed {seed}: {MAX_ATTEMPTS} train-seed runs failed; giving up")


def wait_for_runs(runs: dict[int, FlowRun], timeout_s: float, poll_interval_s: float) -> dict[int, FlowRun]:
    """Poll the seeds' runs until all are final or ``timeout_s`` passed; raise naming each seed that did not
    complete."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    pending = dict(runs)
    done: dict[int, FlowRun] = {}
    with get_client(sync_client=True) as client:
        while pending:
            for seed, run in list(pending.items()):
                run = client.read_flow_run(run.id)
                if run.state is not None and run.state.is_final():
                    del pending[seed]
                    done[seed] = run
            if not pending or time.monotonic() >= deadline:
                break
            time.sleep(min(poll_interval_s, max(0.0, deadline - time.monotonic())))
    problems = [
        f"seed {seed}: train-seed run {run.name} ({run.id}) ended {run.state.type.value if run.state else '?'}"
        + (f": {run.state.message}" if run.state is not None and run.state.message else "")
        for seed, run in sorted(done.items())
        if run.state is None or not run.state.is_completed()
    ]
    problems += [
        f"seed {seed}: train-seed run {run.name} ({run.id}) still not finished after {timeout_s:.0f} s"
        for seed, run in sorted(pending.items())
    ]
    if problems:
        raise FanOutError("distributed training failed:\n  " + "\n  ".join(problems))
    return done


def read_train_result(run_dir: str, seed: int) -> TrainResult:
    """A trained seed's result, from what its train-seed stage recorded in the run directory.

    The weights and the summary are checked against the manifest (for a gs:// run: staged into this
    worker's mirror and verified there, where calibrate reads them next).
    """
    run = RunDir(run_dir)
    summary = RunLayout.SEED_SUMMARY.at(seed=seed)
    for rel in (RunLayout.BEST_WEIGHTS.at(seed=seed), summary):
        try:
            run.verify(rel)
        except StorageError as err:
            raise FanOutError(f"seed {seed} completed but its artifacts are not in the run: {err}") from None
    try:
        result = read_seed_summary(run.path(summary)).to_result(str(run.at(RunLayout.SEED_DIR, seed=seed)))
    except StorageError as err:
        raise FanOutError(f"seed {seed} completed but its summary cannot be read: {err}") from None
    if result.seed != seed:
        raise FanOutError(f"seed {seed} completed but {run.path(summary)} is the summary of seed {result.seed}")
    base = RunLayout.SEED_DIR.at(seed=seed) + "/"
    entries = run.read_manifest().artifacts
    refs = [
        ArtifactRef(
            uri=e.uri if run.remote else str(run.path(rel)), path=rel, sha256=e.sha256, bytes=e.bytes, stage=e.stage
        )
        for rel, e in sorted(entries.items())
        if rel.startswith(base) and e.stage == TRAIN_SEED
    ]
    return TrainResult(result=result, artifacts=refs)


def distributed_train(
    params: PipelineParams, parent_flow_run_id: str, seeds: list[int], parent_mlflow_run: str | None
) -> list[TrainResult]:
    """Start one train-seed run per seed, wait for all, read their results from the run directory."""
    dist = params.distributed
    runs = {
        seed: submit_seed(dist, parent_flow_run_id, child_params(params, seed, parent_mlflow_run), tags=["rts-seed"])
        for seed in seeds
    }
    _logger().info(
        "training on %s: %s", dist.deployment, ", ".join(f"seed {s} -> {r.name} ({r.id})" for s, r in runs.items())
    )
    wait_for_runs(runs, dist.timeout_s, dist.poll_interval_s)
    return [read_train_result(params.run_dir, seed) for seed in seeds]
