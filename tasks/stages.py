"""The stage tasks, generated from the stage specs: one cache key function, one naming rule, no hand lists.

A task's cache key is :func:`rtscore.stages.cache_key` (code fingerprint, the config the stage reads, the
parameters selecting its work, the recorded sha256 of each input), so `rts run` and every deployment key
their caches identically.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, overload

from prefect import Task, task
from prefect.context import TaskRunContext

from rtscore.stages import STAGES, StageSpec, cache_key


def _key(spec: StageSpec) -> Callable[[TaskRunContext, dict[str, Any]], str]:
    def key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
        return cache_key(spec.name, parameters["run_dir"], parameters["cfg"], parameters)

    return key


def run_name(spec: StageSpec) -> Callable[[], str]:
    """The task run's name from the parameters that select its work: ``generate-dataset-train``,
    ``train-seed-42``, ``calibrate-seeds-42-43-44`` (the UI lists what each run did)."""

    def name() -> str:
        from prefect.runtime import task_run

        parts = [spec.name]
        for p in spec.params:
            value = task_run.parameters.get(p)
            if isinstance(value, list | tuple):
                parts += [p, *map(str, value)] if value else [p, "all"]
            elif value is not None:
                parts.append(str(value))
        return "-".join(parts)

    return name


P = ParamSpec("P")
R = TypeVar("R")


@overload
def stage_task(spec: StageSpec) -> Task[..., Any]: ...
@overload
def stage_task(spec: StageSpec, fn: Callable[P, R]) -> Task[P, R]: ...
def stage_task(spec: StageSpec, fn: Callable[..., Any] | None = None) -> Task[..., Any]:
    """The Prefect task of a stage: ``fn`` (default the stage function) cached on the stage's key."""
    return task(
        name=spec.name,
        task_run_name=run_name(spec),
        cache_key_fn=_key(spec),
        persist_result=True,
        description=spec.description,
    )(fn or spec.fn)


TASKS: dict[str, Task[..., Any]] = {s.name: stage_task(s) for s in STAGES if s.name != "train-seed"}
generate_dataset = TASKS["generate-dataset"]
normalization_stats = TASKS["normalization-stats"]
validate_data = TASKS["validate-data"]
logit_cache = TASKS["logit-cache"]
calibrate = TASKS["calibrate"]
evaluate_test = TASKS["evaluate-test"]
package = TASKS["package"]
