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
process. Any other exception is left to Prefect as it is: a bug
keeps every traceback Prefect gives it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar, cast

from prefect import Flow
from prefect import flow as prefect_flow
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect.states import Failed

from rtscore.errors import PipelineError

__all__ = ["RUN_LOGGERS", "OneTraceback", "flow", "one_line_failure"]

RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")  # the loggers Prefect's engines log a run's failure on
_LOGGED = "_rts_traceback_logged"  # set on a PipelineError once its traceback is in the logs

F = TypeVar("F", bound=Callable[..., Any])
P = ParamSpec("P")
R = TypeVar("R")


class OneTraceback(logging.Filter):
    """Keep the first record that logs a PipelineError with its traceback; drop every later one of the same
    error (a flow run's "Encountered exception during execution", the process's "Engine execution exited with
    unexpected exception"). Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, PipelineError):
            return True
        if getattr(exc, _LOGGED, False):
            return False
        setattr(exc, _LOGGED, True)
        return True


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
            if FlowRunContext.get() is None:  # the function called directly (``flow.fn``): the error as it is
                raise
            get_run_logger().error("%s", err, exc_info=err)  # dropped by OneTraceback if a task run logged it
            return Failed(message=_one_line(err), data=err)

    # Prefect validates the parameters against the signature, resolving its annotations in the wrapper's module
    # (``__globals__``): give it the function's signature, resolved where the function was written.
    with contextlib.suppress(NameError):
        run.__signature__ = inspect.signature(fn, eval_str=True)  # type: ignore[attr-defined]
    return cast(F, run)


def _one_line(err: PipelineError) -> str:
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return " ".join(lines) or type(err).__name__


def flow(**kwargs: Any) -> Callable[[Callable[P, R]], Flow[P, R]]:
    """``prefect.flow(**kwargs)`` of :func:`one_line_failure` of the function: the decorator of every rts flow."""

    def decorate(fn: Callable[P, R]) -> Flow[P, R]:
        return prefect_flow(**kwargs)(one_line_failure(fn))

    return decorate
