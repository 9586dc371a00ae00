"""Data flows: generate-dataset, normalization-stats, validate-data, and data-pipeline chaining them."""

from __future__ import annotations

import json

from prefect import flow

from flows.common import load_config, publish_summary, run_stage
from rtscore.stages import ArtifactRef, save_resolved_config
from rtscore.storage import RunDir
from tasks import data as t

SPLITS = ("train", "val", "test")


@flow(name="generate-dataset")
def generate_dataset(
    config: str, run_dir: str, splits: list[str] | None = None, refresh: bool = False, skip_generation: bool = False
) -> list[ArtifactRef]:
    """Generate the tile store of each split into `<run_dir>/datasets/<split>.zarr` (or adopt existing ones)."""
    cfg = load_config(config, skip_generation)
    refs = [run_stage(t.generate_dataset, run_dir, cfg, split, refresh=refresh) for split in splits or SPLITS]
    publish_summary("generate-dataset", "Generated datasets", refs)
    return refs


@flow(name="normalization-stats")
def normalization_stats(config: str, run_dir: str, refresh: bool = False) -> ArtifactRef:
    """Per-channel stats of the train split (`normalization_stats.json`)."""
    cfg = load_config(config)
    ref = run_stage(t.normalization_stats, run_dir, cfg, refresh=refresh)
    publish_summary("normalization-stats", "Normalization stats", [ref], lambda: _stats_md(run_dir))
    return ref


@flow(name="validate-data")
def validate_data(config: str, run_dir: str, refresh: bool = False) -> ArtifactRef:
    """Iterate every split's DataLoader and write `validation/` (fails on any failed check)."""
    cfg = load_config(config)
    ref = run_stage(t.validate_data, run_dir, cfg, refresh=refresh)
    publish_summary("validate-data", "Data validation", [ref], lambda: _report_md(run_dir))
    return ref


@flow(name="data-pipeline")
def data_pipeline(
    config: str, run_dir: str, refresh: bool = False, skip_generation: bool = False
) -> dict[str, ArtifactRef]:
    """generate-dataset (train/val/test) -> normalization-stats -> validate-data."""
    cfg = load_config(config, skip_generation)
    refs = {"config": save_resolved_config(run_dir, cfg)}
    for split in SPLITS:
        refs[f"dataset_{split}"] = run_stage(t.generate_dataset, run_dir, cfg, split, refresh=refresh)
    refs["normalization_stats"] = run_stage(t.normalization_stats, run_dir, cfg, refresh=refresh)
    refs["validation"] = run_stage(t.validate_data, run_dir, cfg, refresh=refresh)
    publish_summary("data-pipeline", f"Data pipeline: {run_dir}", list(refs.values()), lambda: _report_md(run_dir))
    return refs


def _stats_md(run_dir: str) -> str:
    doc = json.loads(RunDir(run_dir).normalization_stats.read_text())
    return "```json\n" + json.dumps(doc, indent=2) + "\n```\n"


def _report_md(run_dir: str) -> str:
    return (RunDir(run_dir).validation_dir / "report.md").read_text()
