"""Data flows: generate-dataset, normalization-stats, validate-data, and data-pipeline chaining them."""

from __future__ import annotations

import contextlib
import json

from prefect import flow

from flows.common import flow_run_scope, load_config, run_stage
from flows.params import SPLITS, DataParams, GenerateParams, StageParams
from flows.ui import publish_files, publish_summary, run_text
from rtscore.stages import ArtifactRef, save_resolved_config
from rtscore.storage import RunDir
from tasks import data as t

SAMPLES = "validation/samples.png"


@flow(name="generate-dataset")
def generate_dataset(params: GenerateParams) -> list[ArtifactRef]:
    """Generate the tile store of each split into `<run_dir>/datasets/<split>.zarr` (or adopt existing ones)."""
    with flow_run_scope():
        cfg = load_config(params, params.skip_generation)
        refs = [
            run_stage(t.generate_dataset, params.run_dir, cfg, split, refresh=params.refresh) for split in params.splits
        ]
        publish_summary("generate-dataset", "Generated datasets", refs, lambda: _datasets_md(params.run_dir, refs))
        return refs


@flow(name="normalization-stats")
def normalization_stats(params: StageParams) -> ArtifactRef:
    """Per-channel stats of the train split (`normalization_stats.json`)."""
    with flow_run_scope():
        cfg = load_config(params)
        ref = run_stage(t.normalization_stats, params.run_dir, cfg, refresh=params.refresh)
        publish_summary("normalization-stats", "Normalization stats", [ref], lambda: _stats_md(params.run_dir))
        return ref


@flow(name="validate-data")
def validate_data(params: StageParams) -> ArtifactRef:
    """Iterate every split's DataLoader and write `validation/` (fails on any failed check)."""
    with flow_run_scope():
        cfg = load_config(params)
        ref = run_stage(t.validate_data, params.run_dir, cfg, refresh=params.refresh)
        publish_summary("validate-data", "Data validation", [ref], lambda: _report_md(params.run_dir))
        publish_files(params.run_dir, "validate-data", [SAMPLES])
        return ref


@flow(name="data-pipeline")
def data_pipeline(params: DataParams) -> dict[str, ArtifactRef]:
    """generate-dataset (train/val/test) -> normalization-stats -> validate-data."""
    with flow_run_scope():
        run_dir, refresh = params.run_dir, params.refresh
        cfg = load_config(params, params.skip_generation)
        refs = {"config": save_resolved_config(run_dir, cfg)}
        for split in SPLITS:
            refs[f"dataset_{split}"] = run_stage(t.generate_dataset, run_dir, cfg, split, refresh=refresh)
        refs["normalization_stats"] = run_stage(t.normalization_stats, run_dir, cfg, refresh=refresh)
        refs["validation"] = run_stage(t.validate_data, run_dir, cfg, refresh=refresh)
        datasets = [refs[f"dataset_{s}"] for s in SPLITS]
        publish_summary(
            "data-pipeline",
            f"Data pipeline: {run_dir}",
            list(refs.values()),
            lambda: _datasets_md(run_dir, datasets) + "\n" + _report_md(run_dir),
        )
        publish_files(run_dir, "validate-data", [SAMPLES])
        return refs


def _datasets_md(run_dir: str, refs: list[ArtifactRef]) -> str:
    """Key figures of the generated stores (from their attributes)."""
    from rtscore.data.store import read_store_attrs

    lines = ["| split | source | seed | tile size | channels | MB |", "|---|---|---|---|---|---|"]
    for ref in refs:
        try:
            a = read_store_attrs(RunDir(run_dir).path(ref.path))
        except Exception:  # a summary never fails a stage
            continue
        lines.append(
            f"| {a.get('split', ref.path)} | {a.get('source', '?')} | {a.get('seed', '?')} | {a.get('tile_size', '?')} "
            f"| {', '.join(a.get('channel_names', []))} | {ref.bytes / 1e6:.1f} |"
        )
    return "\n".join(lines) + "\n"


def _stats_md(run_dir: str) -> str:
    text = run_text(run_dir, "normalization_stats.json")
    with contextlib.suppress(ValueError):
        text = json.dumps(json.loads(text), indent=2)
    return "```json\n" + text.rstrip() + "\n```\n"


def _report_md(run_dir: str) -> str:
    return run_text(run_dir, "validation/report.md", recorded="validation")
