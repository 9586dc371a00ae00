"""Stage generate-dataset: a split's tile store, synthetic or ingested from a GeoTIFF data root."""

from __future__ import annotations

from rtscore.config.base import config_hash, dump_yaml
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.generate import generate_synthetic
from rtscore.data.geotiff import ingest_geotiffs
from rtscore.data.store import read_store_attrs
from rtscore.stages.spec import DATA_CONFIG, ArtifactRef, StageSpec, record, ref_of
from rtscore.storage import RunDir, RunLayout, StorageError


def generate_dataset(
    run_dir: str, cfg: PipelineConfig, split: str, *, progress: bool = False, restart: bool = False
) -> ArtifactRef:
    """Generate ``datasets/<split>.zarr`` (or adopt the existing store when data.skip_generation)."""
    run = RunDir(run_dir)
    rel = RunLayout.DATASET.at(split=split)
    gen = getattr(cfg.data.generation, split)
    if cfg.data.skip_generation:
        run.fetch(rel)  # a gs:// run stages a recorded store first
        read_store_attrs(run.path(rel))  # clear error if it does not exist
        return record(SPEC, run, rel, cfg)
    if gen is None:
        raise StorageError(f"data.generation.{split} is not set; give a generation config or set data.skip_generation")
    run.forget(rel)
    if gen.source == "geotiff":
        assert gen.geotiff is not None  # the config validator guarantees it
        ingest_geotiffs(
            gen,
            gen.geotiff.data_root,
            run.path(rel),
            overwrite=True,
            restart=restart,
            progress=progress,
            split_rules=cfg.splits,
        )
    else:
        generate_synthetic(gen, run.path(rel), overwrite=True, restart=restart, progress=progress)
    return record(SPEC, run, rel, cfg)


def save_resolved_config(run_dir: str, cfg: PipelineConfig) -> ArtifactRef:
    """``config.resolved.yaml``: the config every stage of the run used, generation configs inlined."""
    run = RunDir(run_dir)
    rel = RunLayout.CONFIG.at()
    dump_yaml(cfg, run.path(rel))
    return ref_of(run, run.record(rel, "config", config_hash(cfg)))


SPEC = StageSpec(
    name="generate-dataset",
    fn=generate_dataset,
    inputs=(),
    outputs=(RunLayout.DATASET,),
    config=DATA_CONFIG,
    params=("split",),
    description="Generate (or ingest) the tile store of one split.",
)
