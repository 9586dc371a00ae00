"""Data flows: tile-scenes (scenes and polygons to a data root), generate-dataset, normalization-stats,
validate-data (each built from its stage spec), and data-pipeline chaining the last three."""

from __future__ import annotations

from flows import ui
from flows.common import flow_run_scope, load_config, run_namer, run_stage
from flows.failures import flow
from flows.params import SPLITS, DataParams, GenerateParams, StageParams, TileParams
from flows.stage_flow import stage_flow
from rtscore.data.tiling.run import TilingManifest
from rtscore.stages import ArtifactRef, DataResult, save_resolved_config
from rtscore.stages.generate import SPEC as GENERATE_DATASET
from rtscore.stages.normalization import SPEC as NORMALIZATION_STATS
from rtscore.stages.validate import SPEC as VALIDATE_DATA
from rtscore.storage import absolute_location
from tasks import stages as t
from tasks import tiling


@flow(name="tile-scenes", flow_run_name=run_namer("tile-scenes", TileParams, ("config",)))
def tile_scenes(params: TileParams) -> TilingManifest:
    """Scenes or quads and an RTS polygon inventory -> PLANET-RGB/, EXTRA/, labels/, metadata.csv (`rts tile`)."""
    with flow_run_scope():
        # Absolute paths: the tiling config's own paths resolve against its folder, and the resume fingerprint
        # of the output holds them (the same folder reached from another working directory is the same input).
        output = absolute_location(params.output) if params.output else None
        manifest = tiling.tile(absolute_location(params.config), output, params.overwrite)
        ui.publish_tiling(manifest)
        return manifest


generate_dataset = stage_flow(
    GENERATE_DATASET,
    GenerateParams,
    list[ArtifactRef],
    lambda params, cfg, refs: ui.publish_datasets(params.run_dir, refs),
    module=__name__,
    description="Generate the tile store of each split into `<run_dir>/datasets/<split>.zarr` (or adopt existing "
    "ones).",
    collect=list,
)
normalization_stats = stage_flow(
    NORMALIZATION_STATS,
    StageParams,
    ArtifactRef,
    lambda params, cfg, ref: ui.publish_stats(params.run_dir, ref),
    module=__name__,
    description="Per-channel stats of the train split (`normalization_stats.json`).",
)
validate_data = stage_flow(
    VALIDATE_DATA,
    StageParams,
    ArtifactRef,
    lambda params, cfg, ref: ui.publish_validation(params.run_dir, ref),
    module=__name__,
    description="Iterate every split's DataLoader and write `validation/` (fails on any failed check).",
)


@flow(name="data-pipeline", flow_run_name=run_namer("data-pipeline", DataParams, ()))
def data_pipeline(params: DataParams) -> DataResult:
    """generate-dataset (train/val/test) -> normalization-stats -> validate-data."""
    with flow_run_scope():
        run_dir, refresh = params.run_dir, params.refresh
        cfg = load_config(params, params.skip_generation)
        config = save_resolved_config(run_dir, cfg)
        datasets = {split: run_stage(t.generate_dataset, run_dir, cfg, split, refresh=refresh) for split in SPLITS}
        result = DataResult(
            config=config,
            datasets=datasets,
            normalization_stats=run_stage(t.normalization_stats, run_dir, cfg, refresh=refresh),
            validation=run_stage(t.validate_data, run_dir, cfg, refresh=refresh),
        )
        ui.publish_data_pipeline(run_dir, result.named(), list(result.datasets.values()))
        return result


__all__ = ["data_pipeline", "generate_dataset", "normalization_stats", "tile_scenes", "validate_data"]
