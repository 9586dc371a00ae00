"""One flow per stage spec: the flow a stage is re-run alone with (a deployment, the UI, an `rts` command) is built
from the stage's :class:`~rtscore.stages.StageSpec`, never written out by hand.

:func:`stage_flow` gives every such flow the same body: the flow-run scope, the config with the flow's overrides,
one cached run of the stage task per selection of its work (:func:`flows.common.selections`: each split, the seed,
the seeds), each through :func:`flows.common.run_stage` (a cached result whose artifacts were lost or changed is
recomputed), then the flow's publication in the UI. Its name is the stage's, its runs are named after the work
they select (``train-seed-42``, ``evaluate-test-seeds-42-43``), and its single ``params`` argument is the typed
model the UI builds its form from. A new stage needs its spec, its params model and what it publishes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from prefect import Flow, Task

from flows.common import (
    StageArgs,
    flow_run_scope,
    load_config,
    name_fields,
    refresh_of,
    run_namer,
    run_stage,
    selections,
    skip_generation_of,
)
from flows.failures import flow
from flows.params import RunParams
from rtscore.config import PipelineConfig
from rtscore.stages import StageSpec
from rtscore.storage import RunDir
from tasks.stages import TASKS

P = TypeVar("P", bound=RunParams)
R = TypeVar("R")

__all__ = ["stage_flow"]


def _one(results: list[Any]) -> Any:
    (result,) = results
    return result


def _no_extra(params: Any) -> StageArgs:
    return {}


def stage_flow(
    spec: StageSpec,
    params_model: type[P],
    returns: type[R],
    publish: Callable[[P, PipelineConfig, R], None],
    *,
    module: str,
    description: str | None = None,
    task: Task[..., Any] | None = None,
    extra: Callable[[P], StageArgs] = _no_extra,
    redo: StageArgs | None = None,
    collect: Callable[[list[Any]], R] = _one,
) -> Flow[[P], R]:
    """The flow of stage ``spec``: ``params_model`` in, ``returns`` out (``collect`` of the stage runs' results,
    default the one result), ``publish(params, cfg, result)`` before it returns.

    ``module`` is the module the flow is an attribute of (prefect.yaml's entrypoint ``<module>:<stage_name>``);
    ``task`` the stage's task (default the one generated from the spec); ``extra`` the stage function's arguments
    that do not select work (train-seed's ``fresh`` and parent MLflow run); ``redo`` those that recompute a stage
    run whose cached artifacts were lost (:func:`flows.common.run_stage`)."""
    stage_task = task if task is not None else TASKS[spec.name]

    def body(params: Any) -> Any:
        with flow_run_scope():
            cfg = load_config(params, skip_generation_of(params))
            refresh = refresh_of(params)
            results = [
                run_stage(stage_task, params.run_dir, cfg, refresh=refresh, redo=redo, **args, **extra(params))
                for args in selections(spec, params, cfg, RunDir(params.run_dir))
            ]
            result = collect(results)
            publish(params, cfg, result)
            return result

    attribute = spec.name.replace("-", "_")
    body.__name__ = body.__qualname__ = attribute
    body.__module__ = module
    body.__doc__ = description or spec.description
    # What Prefect validates the run's parameters against and builds the UI form from (no string annotations).
    body.__annotations__ = {"params": params_model, "return": returns}
    return flow(
        name=spec.name,
        flow_run_name=run_namer(spec.name, params_model, name_fields(spec, params_model)),
    )(body)
