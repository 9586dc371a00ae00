"""How a failed flow run reads in the UI: a :class:`~rtscore.errors.PipelineError` (the error a user can act on,
whose text names the field, file or stage and what to do) is the run's state message as it is, one line, and
its traceback is in the run's logs once.

Left to Prefect, one such error shows five times: the task engine logs it with its traceback, each flow run it
passes through (the stage's subflow, the pipeline) logs it again with its traceback, the flow-run process logs
it a last time when it exits ("Engine execution exited with unexpected exception"), and each run's state
message is ``Flow run encountered an exception: TrainingError: <the text>``, the hint at the very end.

:func:`flow` is ``prefect.flow`` whose function turns a PipelineError into a Failed state with the error's text
as its message (the error stays the state's data: a caller of the flow, a parent flow or ``rts``, gets the same
exception raised); called directly (``flow.fn``, outside a run) it raises as written. :class:`OneTraceback`
drops a record of Prefect's run loggers that repeats a PipelineError already logged with its traceback in this
process. A flow run that fails because one of its subflows did still says so at error level in its own logs, in
one line naming the run whose logs hold the traceback: the UI shows a run's logs alone, and a parent whose logs
hold no error line read as if nothing had gone wrong in it. Any other exception is left to Prefect as it is: a bug
keeps every traceback Prefect gives it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar, cast

from prefect import Flow
from prefect import flow as prefect_flow
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect.states import Failed

from rtscore.errors import PipelineError

__all__ = ["RUN_LOGGERS", "OneTraceback", "flow", "one_line_failure"]

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # the loggers Prefect's engines log a run's failure on
_LOGGED = "_rts_traceback_logged"  # set on a PipelineError once its traceback is in the logs: a _LoggedIn

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class _LoggedIn:
    """Where a PipelineError's traceback was logged: the flow run whose logs hold it, and that run (or its task
    run) in words."""

    flow_run_id: str
    where: str


class OneTraceback(logging.Filter):
    """Keep the first record that logs a PipelineError with its traceback; drop every later one of the same
    error (a flow run's "Encountered exception during execution", the process's "Engine execution exited with
    unexpected exception"). Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, PipelineError):
            return True
        if getattr(exc, _LOGGED, None) is not None:
            return False
        setattr(exc, _LOGGED, _logged_in(record))
        return True


def _logged_in(record: logging.LogRecord) -> _LoggedIn:
    """The run a record of Prefect's run loggers belongs to (its ``extra``): ``task run 'train-seed-1' of flow run
    'multi-seed-train'`` or ``flow run 'multi-seed-train'``."""
    flow_run = f"flow run '{getattr(record, 'flow_run_name', '<unknown>')}'"
    task_run = getattr(record, "task_run_name", None)
    where = f"task run '{task_run}' of {flow_run}" if task_run else flow_run
    return _LoggedIn(flow_run_id=str(getattr(record, "flow_run_id", "")), where=where)


def install() -> None:
    """Put :class:`OneTraceback` on Prefect's run loggers (once per process)."""
    for name in RUN_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, OneTraceback) for f in logger.filters):
            logger.addFilter(OneTraceback())


def one_line_failure(fn: F) -> F:
    """``fn``, a flow's function, with a PipelineError returned as a Failed state whose message is the error's
    text (logged once with its traceback if no task run logged it before)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        install()
        try:
            return fn(*args, **kwargs)
        except PipelineError as err:
            context = FlowRunContext.get()
            if context is None or context.flow_run is None:  # called directly (``flow.fn``): the error as it is
                raise
            _log_failure(err, str(context.flow_run.id))
            return Failed(message=_one_line(err), data=err)

    # Prefect validates the parameters against the signature, resolving its annotations in the wrapper's module
    # (``__globals__``): give it the function's signature, resolved where the function was written.
    with contextlib.suppress(NameError):
        run.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return cast(F, run)


def _log_failure(err: PipelineError, flow_run_id: str) -> None:
    """``err`` in the logs of the failing flow run ``flow_run_id``, at error level: with its traceback where no run
    logged it yet; one line naming the run that holds its traceback where that is another run (a subflow, or a
    task run of one); nothing more where this run's logs hold it already (one of its own task runs)."""
    logged_in = getattr(err, _LOGGED, None)
    if logged_in is None:
        get_run_logger().error("%s", err, exc_info=err)
    elif logged_in.flow_run_id != flow_run_id:
        get_run_logger().error("failed in %s: %s", logged_in.where, _one_line(err))


def _one_line(err: PipelineError) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines) or type(err).__name__


def flow(**kwargs: Any) -> Callable[[Callable[P, R]], Flow[P, R]]:
    """``prefect.flow(**kwargs)`` of :func:`one_line_failure` of the function: the decorator of every rts flow."""

    def decorate(fn: Callable[P, R]) -> Flow[P, R]:
        return prefect_flow(**kwargs)(one_line_failure(fn))

    return decorate
