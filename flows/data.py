"""Data flows: tile-scenes (scenes and polygons to a data root), generate-dataset, normalization-stats,
validate-data, and data-pipeline chaining the last three."""

from __future__ import annotations

from flows import ui
from flows.common import flow_run_scope, load_config, run_stage
from flows.failures import flow
from flows.params import SPLITS, DataParams, GenerateParams, StageParams, TileParams
from rtscore.data.tiling import TilingManifest
from rtscore.stages import ArtifactRef, save_resolved_config
from rtscore.storage import absolute_location
from tasks import stages as t
from tasks import tiling


@flow(name="tile-scenes")
def tile_scenes(params: TileParams) -> TilingManifest:
    """Scenes or quads and an RTS polygon inventory -> PLANET-RGB/, EXTRA/, labels/, metadata.csv (`rts tile`)."""
    with flow_run_scope():
        # Absolute paths: the tiling config's own paths resolve against its folder, and the resume fingerprint
        # of the output holds them (the same folder reached from another working directory is the same input).
        output = absolute_location(params.output) if params.output else None
        manifest = tiling.tile(absolute_location(params.config), output, params.overwrite)
        ui.publish_tiling(manifest)
        return manifest


@flow(name="generate-dataset")
def generate_dataset(params: GenerateParams) -> list[ArtifactRef]:
    """Generate the tile store of each split into `<run_dir>/datasets/<split>.zarr` (or adopt existing ones)."""
    with flow_run_scope():
        cfg = load_config(params, params.skip_generation)
        refs = [
            run_stage(t.generate_dataset, params.run_dir, cfg, split, refresh=params.refresh) for split in params.splits
        ]
        ui.publish_datasets(params.run_dir, refs)
        return refs


@flow(name="normalization-stats")
def normalization_stats(params: StageParams) -> ArtifactRef:
    """Per-channel stats of the train split (`normalization_stats.json`)."""
    with flow_run_scope():
        cfg = load_config(params)
        ref = run_stage(t.normalization_stats, params.run_dir, cfg, refresh=params.refresh)
        ui.publish_stats(params.run_dir, ref)
        return ref


@flow(name="validate-data")
def validate_data(params: StageParams) -> ArtifactRef:
    """Iterate every split's DataLoader and write `validation/` (fails on any failed check)."""
    with flow_run_scope():
        cfg = load_config(params)
        ref = run_stage(t.validate_data, params.run_dir, cfg, refresh=params.refresh)
        ui.publish_validation(params.run_dir, ref)
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
        ui.publish_data_pipeline(run_dir, refs, [refs[f"dataset_{s}"] for s in SPLITS])
        return refs
