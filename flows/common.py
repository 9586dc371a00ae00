"""Helpers shared by flows: config loading, cached-result checks, summary artifacts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect.artifacts import create_markdown_artifact

from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.stages import ArtifactRef
from rtscore.storage import RunDir


def load_config(config: str) -> PipelineConfig:
    return load_pipeline_config(config)


def intact(run_dir: str, ref: ArtifactRef) -> bool:
    """A cached result is only reusable if its artifact is still recorded with the same fingerprint."""
    run = RunDir(run_dir)
    entry = run.entry(ref.path)
    return entry is not None and entry.sha256 == ref.sha256 and run.path(ref.path).exists()


def run_stage(task: Any, run_dir: str, *args: Any, refresh: bool = False, **kwargs: Any) -> ArtifactRef:
    """Call a stage task (cached unless ``refresh``); recompute if its cached artifact was lost or changed."""
    ref: ArtifactRef = task.with_options(refresh_cache=refresh)(run_dir, *args, **kwargs)
    if not intact(run_dir, ref):
        ref = task.with_options(refresh_cache=True)(run_dir, *args, **kwargs)
    return ref


def publish_summary(key: str, title: str, refs: list[ArtifactRef], extra: Callable[[], str] | None = None) -> None:
    rows = "\n".join(f"| {r.stage} | `{r.path}` | {r.bytes:,} | `{r.sha256[:12]}` |" for r in refs)
    md = f"# {title}\n\n| stage | artifact | bytes | sha256 |\n|---|---|---|---|\n{rows}\n"
    if extra is not None:
        md += "\n" + extra()
    create_markdown_artifact(key=key, markdown=md, description=title)
