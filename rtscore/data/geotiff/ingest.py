"""``rts generate --source geotiff``: the tiles of one split of a GeoTIFF data root as a published tile store.

The steps, in order: open the root (its identity, a local copy of a ``gs://`` root), select the split's tiles
(its splits.yaml, or a split derived for it), check every file against the raster contract, describe the store
(layout, attributes, the keys that say which staged shards may be resumed), write it, and write the derived
split beside it once it is out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtscore.config.base import config_hash
from rtscore.config.generation import GenerationConfig, GeotiffSourceConfig
from rtscore.config.pipeline import SplitsConfig
from rtscore.data.geotiff.checks import CheckedTiles, check_tiles
from rtscore.data.geotiff.producer import GeotiffProducer
from rtscore.data.geotiff.root import SPLITS_YAML, GeotiffError, TileEntry, read_splits
from rtscore.data.geotiff.root_splits import DerivedSplitFiles, derive_root_splits, write_derived_split
from rtscore.data.geotiff.selection import select_tiles
from rtscore.data.geotiff.staging import stage_data_root
from rtscore.data.raster.ground import GroundSizeError, projected_crs
from rtscore.data.splits.regions import SplitResult
from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import StoreLayout
from rtscore.data.store.writer import base_attrs, write_store
from rtscore.identity import SourceError, SourceIdentity, digest, resume_key, source_identity

_log = logging.getLogger(__name__)


def ingest_geotiffs(
    cfg: GenerationConfig,
    data_root: str | Path,
    output: str | Path,
    *,
    overwrite: bool = False,
    restart: bool = False,
    progress: bool = False,
    num_workers: int | None = None,
    split_rules: SplitsConfig | None = None,
    derived_splits: DerivedSplitFiles | None = None,
) -> StoreAttrs:
    """`rts generate --source geotiff`: the tiles of ``cfg.split`` of a GeoTIFF data root as a published tile store.

    Tiles: the rows of metadata.csv whose RegionName is a region of ``cfg.split`` in splits.yaml, in file order.
    Every file is checked against the raster contract of ``cfg.geotiff`` (:func:`check_tiles`) before any store
    is staged; the store is published atomically by :func:`write_store` and records the contract
    (``raster_contract``, with the data's pixel size), each tile's ground pixel area (``meta/pixel_area_m2``),
    footprint (``meta/bounds``: minx, miny, maxx, maxy in the contract's CRS), and inventory ids and latitude from
    metadata.csv (``meta/uids``, ``negative_uids``, ``object_pixels``, ``latitude``); exact labels only. ``cfg``
    gives the split, tile size, scale, the input binding (which EXTRA band each stored channel is read from;
    recorded in the store as ``input_binding``), the raster contract (``geotiff``), store layout and workers.

    Args:
        cfg: Generation config (its ``synthetic`` counts and regions are not used).
        data_root: Root of the layout (local directory).
        output: Store to write.
        overwrite: Replace an existing store.
        restart: Discard an interrupted ingestion instead of resuming it.
        progress: Show a progress bar.
        num_workers: Worker processes (default ``processing.num_workers``).
        split_rules: The pipeline config's `splits` section: the rules a split derived for a root without
            splits.yaml must meet (None: its defaults).
        derived_splits: Where such a derived split and its summary are written (a run's
            ``RunLayout.DERIVED_SPLITS``); None: beside ``output``. Never into the data root.

    Returns:
        The published store's attributes (counts and prevalence included). The counts are a partition of the
        tiles (positive + negative + full NoData), each tile judged on its pixels after every NoData rule.
    """
    root, identity = _open_root(data_root, cfg.split)
    tiles = _split_tiles(cfg, root, split_rules)
    plan = _plan_store(cfg, root, identity, tiles.entries, tiles.checked)
    published = write_store(
        _producer(cfg, root, tiles),
        plan.layout,
        Path(output),
        plan.attrs,
        num_workers=num_workers or cfg.processing.num_workers,
        overwrite=overwrite,
        restart=restart,
        progress=progress,
        resume_key=plan.resume_key,
    )
    _log.info(
        f"ingested split {cfg.split} of {root} into {output}: {published.counts.partition()} (after every NoData "
        "rule: a tile's kind is its stored pixels', not metadata.csv's TrainClass)"
    )
    _write_derived(tiles.derived, root, derived_splits or DerivedSplitFiles.beside(Path(output)))  # once it is out
    return published


def _open_root(data_root: str | Path, split: str) -> tuple[Path, SourceIdentity]:
    """The root as a local directory (a ``gs://`` root: the copy of what ``split`` needs) and its identity, taken
    before anything is read: what the root holds now keys the staged shards."""
    if not str(data_root).startswith("gs://") and not Path(data_root).is_dir():
        raise GeotiffError(f"data root {data_root} is not a directory")
    try:
        identity = source_identity(data_root)
    except SourceError as err:
        raise GeotiffError(f"data root {data_root}: {err}") from None
    root = stage_data_root(str(data_root), split) if str(data_root).startswith("gs://") else Path(data_root)
    return root, identity


@dataclass(frozen=True)
class SplitTiles:
    """The tiles of a split, every file checked: what its store will hold, known before any store is staged."""

    entries: list[TileEntry]
    checked: CheckedTiles
    derived: SplitResult | None  # the split derived for a root without splits.yaml (None: the root's splits.yaml)


def _split_tiles(cfg: GenerationConfig, root: Path, split_rules: SplitsConfig | None) -> SplitTiles:
    """The tiles of ``cfg.split`` (the rows of metadata.csv whose RegionName is one of its regions, in file order;
    the regions from splits.yaml, or from a split derived for a root without one) and every file checked against the
    raster contract of ``cfg.geotiff`` (its CRS a projected one: a tile's ground size is measured in it). Its own
    step: everything in the root's content that can refuse the ingestion, done before a store is staged."""
    source = cfg.geotiff or GeotiffSourceConfig(data_root=str(root))
    try:
        projected_crs(source.crs, "geotiff.crs")
    except GroundSizeError as err:
        raise GeotiffError(str(err)) from None
    binding = cfg.input_binding
    derived = derive_root_splits(root, rules=split_rules)
    splits = read_splits(root) if derived is None else derived.splits
    entries = select_tiles(root, cfg.split, with_extra=bool(binding.extra_names), splits=splits)
    return SplitTiles(entries, check_tiles(root, entries, cfg.tile_size, binding, source.contract()), derived)


def _producer(cfg: GenerationConfig, root: Path, tiles: SplitTiles) -> GeotiffProducer:
    """What renders the checked tiles for the store's writer: each read through the input binding under the checked
    contract, with its ground pixel area, in batches of ``geotiff.batch_size`` (else the synthetic config's
    generation batch, else 16). Its own step: the reading side of the store, apart from its layout and attributes."""
    batch = cfg.geotiff.batch_size if cfg.geotiff else cfg.synthetic.generation_batch_size if cfg.synthetic else 16
    checked = tiles.checked
    return GeotiffProducer(
        root, tiles.entries, cfg.input_binding, batch, contract=checked.contract, pixel_area_m2=checked.pixel_area_m2
    )


@dataclass(frozen=True)
class StorePlan:
    """What the store of a split will be: its layout, its attributes and the key its staged shards carry."""

    layout: StoreLayout
    attrs: dict[str, Any]
    resume_key: str


def _plan_store(
    cfg: GenerationConfig, root: Path, identity: SourceIdentity, entries: list[TileEntry], checked: CheckedTiles
) -> StorePlan:
    """The store's layout and attributes (config, data root, input binding, the checked raster contract) and the
    resume key: staged shards are resumed only for the same store, root content and ingestion code."""
    extra = cfg.input_binding.extra_names
    layout = StoreLayout(
        n_tiles=len(entries),
        tile_size=cfg.tile_size,
        extra_channel_names=tuple(extra),
        shard_tiles=cfg.store.shard_tiles,
        compressor=cfg.store.compressor,
        clevel=cfg.store.clevel,
        write_noisy=False,
        write_bounds=True,  # meta/bounds: each tile's footprint, for spatial blocking by geometry
        write_inventory=True,  # meta/uids, negative_uids, object_pixels, latitude: from metadata.csv
    )
    attrs = base_attrs(
        split=cfg.split,
        source="geotiff",
        tile_size=cfg.tile_size,
        extra=extra,
        mask_types=["exact"],
        dataset_version=cfg.dataset_version,
        scale=cfg.scale,
        pixel_size_m=checked.contract.pixel_size,
    )
    fingerprint = {"config": config_hash(cfg), "data_root": str(root.resolve()), "tiles": [e.tile_id for e in entries]}
    store_hash = digest(fingerprint)
    attrs.update(
        {
            "config": cfg.model_dump(mode="json"),
            "config_hash": store_hash,
            "data_root": str(root.resolve()),
            "input_binding": cfg.input_binding.model_dump(mode="json"),
            "raster_contract": checked.contract.model_dump(mode="json"),
            "shard_tiles": cfg.store.shard_tiles,
        }
    )
    return StorePlan(layout, attrs, resume_key(__name__, store_hash, identity.digest))


def _write_derived(derived: SplitResult | None, root: Path, to: DerivedSplitFiles) -> None:
    """The split derived for a root without splits.yaml, beside the output (never into the root, an input); a root
    with one has none (``derived`` None: nothing written). Written once the store is out, so that a refused
    ingestion leaves nothing behind."""
    if derived is None:
        return
    write_derived_split(derived, to)
    _log.info(f"{root} has no {SPLITS_YAML}: the split derived for it is in {to.splits_yaml} ({to.summary_json})")
