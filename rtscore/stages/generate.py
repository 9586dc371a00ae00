"""Stage generate-dataset: a split's tile store, synthetic or ingested from a GeoTIFF data root."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rtscore.config.base import config_hash, dump_yaml
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.geotiff.ingest import ingest_geotiffs
from rtscore.data.geotiff.root_splits import DerivedSplitFiles
from rtscore.data.store.format import read_store_attrs
from rtscore.data.synthetic.producer import generate_synthetic, generate_synthetic_context
from rtscore.data.tiling.rules import check_data_roots
from rtscore.stages.spec import ArtifactRef, StageSpec, record, ref_of
from rtscore.storage import RunDir, RunLayout, StorageError


def wants_context(cfg: PipelineConfig, split: str) -> bool:
    """Whether ``split`` gets a 0.5x context store: val and test, when 0.5x is calibrated or deployed."""
    scales = [*cfg.calibration.scale_candidates, *cfg.deployment.scales]
    return split in ("val", "test") and any(s != 1.0 for s in scales)


def generate_dataset(
    run_dir: str, cfg: PipelineConfig, split: str, *, progress: bool = False, restart: bool = False
) -> ArtifactRef:
    """Generate ``datasets/<split>.zarr`` (or adopt the existing store when data.skip_generation).

    For a synthetic val or test split whose config calibrates or deploys 0.5x (:func:`wants_context`), also
    ``datasets/context/<split>.zarr``: each tile's 2x field of view downsampled to the tile size, same ids
    (guide §8.3). A GeoTIFF root gets none (calibration then reports the scale gate "not evaluated"). A GeoTIFF
    root without splits.yaml gets its split derived into ``datasets/splits.yaml`` (+ ``splits_summary.json``).
    A data root cut by ``rts tile`` with other split rules than ``cfg.splits`` is refused first, before any split
    is generated (:func:`~rtscore.data.tiling.rules.check_data_roots`)."""
    run = RunDir(run_dir)
    rel = RunLayout.DATASET.at(split=split)
    ctx_rel = RunLayout.CONTEXT_DATASET.at(split=split)
    gen = getattr(cfg.data.generation, split)
    if cfg.data.skip_generation:
        run.fetch(rel)  # a gs:// run stages a recorded store first
        read_store_attrs(run.path(rel))  # clear error if it does not exist
        run.fetch(ctx_rel)
        if run.path(ctx_rel).exists():  # an adopted context store is checked against its store when paired
            record(SPEC, run, ctx_rel, cfg)
        return record(SPEC, run, rel, cfg)
    if gen is None:
        raise StorageError(f"data.generation.{split} is not set; give a generation config or set data.skip_generation")
    check_data_roots(cfg)  # every root of the config: refused before the first split, not after one was written
    run.forget(rel)
    run.forget(ctx_rel)
    shutil.rmtree(run.path(ctx_rel), ignore_errors=True)  # a stale context would pair with the new tiles' ids
    if gen.source == "geotiff":
        assert gen.geotiff is not None  # the config validator guarantees it
        derived = (RunLayout.DERIVED_SPLITS.at(), RunLayout.DERIVED_SPLITS_SUMMARY.at())
        for d in derived:
            run.forget(d)
            run.path(d).unlink(missing_ok=True)  # a split derived for another root must not outlive it
        ingest_geotiffs(
            gen,
            gen.geotiff.data_root,
            run.path(rel),
            overwrite=True,
            restart=restart,
            progress=progress,
            split_rules=cfg.splits,
            derived_splits=DerivedSplitFiles(*(run.path(d) for d in derived)),
        )
        for d in derived:
            if run.path(d).is_file():
                record(SPEC, run, d, cfg)
    else:
        generate_synthetic(gen, run.path(rel), overwrite=True, restart=restart, progress=progress)
        if wants_context(cfg, split):
            generate_synthetic_context(gen, run.path(ctx_rel), overwrite=True, restart=restart, progress=progress)
            record(SPEC, run, ctx_rel, cfg)
    return record(SPEC, run, rel, cfg)


def save_resolved_config(run_dir: str, cfg: PipelineConfig) -> ArtifactRef:
    """``config.resolved.yaml``: the config every stage of the run used, generation configs inlined."""
    run = RunDir(run_dir)
    rel = RunLayout.CONFIG.at()
    dump_yaml(cfg, run.path(rel))
    return ref_of(run, run.record(rel, "config", config_hash(cfg)))


def read_locations(cfg: PipelineConfig, params: Mapping[str, Any], run: RunDir) -> list[str]:
    """What generating ``params["split"]`` reads outside the run's records: the GeoTIFF data root it ingests, or
    the store it adopts (``data.skip_generation``); nothing for synthetic scenes (the config is all they read)."""
    split = str(params["split"])
    if cfg.data.skip_generation:
        rel = RunLayout.DATASET.at(split=split)
        return [run.uri_of(rel) if run.remote else str(run.path(rel))]
    gen = getattr(cfg.data.generation, split)
    if gen is not None and gen.source == "geotiff" and gen.geotiff is not None:
        root = gen.geotiff.data_root
        return [root if root.startswith("gs://") else str(Path(root).resolve())]
    return []


SPEC = StageSpec(
    name="generate-dataset",
    fn=generate_dataset,
    inputs=(),
    outputs=(RunLayout.DATASET, RunLayout.CONTEXT_DATASET, RunLayout.DERIVED_SPLITS, RunLayout.DERIVED_SPLITS_SUMMARY),
    # What it reads: the data and split sections (the generation configs, the split rules of a derived split) and
    # whether 0.5x context stores are wanted; not how a loader, the sampler or augmentation will read the stores,
    # nor which EXTRA channels a model takes from them (a store holds every channel its generation config names).
    config=("schema_version", "data", "splits", "calibration.scale_candidates", "deployment.scales"),
    config_ignores=("data.loader",),
    per_split=("data.generation",),  # a split's store reads its own generation config only
    params=("split",),
    sources=read_locations,
    description="Generate (or ingest) the tile store of one split.",
)
