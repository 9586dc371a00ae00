"""The Prefect artifacts the tasks and flows publish, one card per key in a flow run: each ``create_*_artifact``
here is Prefect's (:mod:`prefect.artifacts`) that, once it made a keyed artifact, deletes the artifacts of the same
key that the same flow run made before (:func:`one_per_key`).

A retried flow run (the UI's Retry, a flow's ``retries``) is the same flow run run again: each attempt publishes its
cards again, and the run's Artifacts tab listed every attempt's card of a key, among them the failed attempt's
progress card stuck half-way. The Artifacts page keeps a key's history across runs: one version per run.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, TypeVar, cast
from uuid import UUID

from prefect import artifacts

__all__ = [
    "create_image_artifact",
    "create_link_artifact",
    "create_markdown_artifact",
    "create_progress_artifact",
    "create_table_artifact",
    "drop_earlier",
    "one_per_key",
]

C = TypeVar("C", bound=Callable[..., Any])


def one_per_key(create: C) -> C:
    """``create`` (a ``prefect.artifacts.create_*_artifact``) that, once it made a keyed artifact in a flow run,
    deletes that run's earlier artifacts of the same key (:func:`drop_earlier`)."""

    @functools.wraps(create)
    def latest(*args: Any, **kwargs: Any) -> Any:
        made = create(*args, **kwargs)
        if (key := kwargs.get("key")) and isinstance(made, UUID):  # called sync (a coroutine is its caller's)
            drop_earlier(key, made)
        return made

    return cast(C, latest)


def drop_earlier(key: str, keep: UUID) -> None:
    """Delete the artifacts of ``key`` that this flow run made, all but ``keep`` (the one just made); nothing outside
    a flow run. Never fails a stage: where the server refuses, the run's logs say the earlier card is kept."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
    from prefect.logging import get_run_logger
    from prefect.utilities.context import get_task_and_flow_run_ids

    _, flow_run_id = get_task_and_flow_run_ids()
    if flow_run_id is None:
        return
    try:
        with get_client(sync_client=True) as client:
            found = client.read_artifacts(
                artifact_filter=ArtifactFilter(
                    key=ArtifactFilterKey(any_=[key]), flow_run_id=ArtifactFilterFlowRunId(any_=[flow_run_id])
                )
            )
            for earlier in found:
                if earlier.id != keep:
                    client.delete_artifact(earlier.id)
    except Exception as err:  # a card shown twice is better than a failed stage
        with contextlib.suppress(Exception):
            get_run_logger().warning(f"artifact {key}: this run's earlier card is kept: {type(err).__name__}: {err}")


create_image_artifact = one_per_key(artifacts.create_image_artifact)
create_link_artifact = one_per_key(artifacts.create_link_artifact)
create_markdown_artifact = one_per_key(artifacts.create_markdown_artifact)
create_progress_artifact = one_per_key(artifacts.create_progress_artifact)
create_table_artifact = one_per_key(artifacts.create_table_artifact)
