"""Helpers shared by flows: config loading, cached-result checks, summary artifacts."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prefect.artifacts import create_markdown_artifact

from rtscore.config import PipelineConfig, load_pipeline_config
from rtscore.stages import ArtifactRef
from rtscore.storage import RunDir


def load_config(config: str, skip_generation: bool = False) -> PipelineConfig:
    """The pipeline config; ``skip_generation`` adopts the run's existing stores instead of generating them."""
    cfg = load_pipeline_config(config)
    if skip_generation:
        cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"skip_generation": True})})
    return cfg


def intact(run_dir: str, result: Any) -> bool:
    """A cached result is only reusable if its artifacts are still recorded with the same fingerprints.

    ``result`` is an ArtifactRef, or a model with an ``artifacts`` list of them.
    """
    run = RunDir(run_dir)
    refs: list[ArtifactRef] = result.artifacts if hasattr(result, "artifacts") else [result]

    def ok(ref: ArtifactRef) -> bool:
        entry = run.entry(ref.path)
        return entry is not None and entry.sha256 == ref.sha256 and run.path(ref.path).exists()

    return all(ok(r) for r in refs)


def run_stage(task: Any, run_dir: str, *args: Any, refresh: bool = False, **kwargs: Any) -> Any:
    """Call a stage task (cached unless ``refresh``); recompute if its cached artifacts were lost or changed."""
    result = task.with_options(refresh_cache=refresh)(run_dir, *args, **kwargs)
    if not intact(run_dir, result):
        result = task.with_options(refresh_cache=True)(run_dir, *args, **kwargs)
    return result


def publish_summary(key: str, title: str, refs: list[ArtifactRef], extra: Callable[[], str] | None = None) -> None:
    rows = "\n".join(f"| {r.stage} | `{r.path}` | {r.bytes:,} | `{r.sha256[:12]}` |" for r in refs)
    md = f"# {title}\n\n| stage | artifact | bytes | sha256 |\n|---|---|---|---|\n{rows}\n"
    if extra is not None:
        md += "\n" + extra()
    create_markdown_artifact(key=key, markdown=md, description=title)
