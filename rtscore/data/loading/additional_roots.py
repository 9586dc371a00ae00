"""``data.additional_roots``: the extra train stores joined to the run's for joint training (guide §8.3), resolved
against the run directory and each checked (split, tile size, channels and their bands, labels, no shared tile id,
and spatial blocking against the val and test stores: no region of theirs, no footprint overlapping or within
``splits.min_distance_m`` of one of their tiles) before any training step."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rtscore.config.binding import binding_conflicts
from rtscore.data.loading.sources import TileSource
from rtscore.data.splits.blocking import TRAIN, BlockingError, blocking_problem, measure_sources, store_footprints
from rtscore.data.store.format import TileStoreError, read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.storage.layout import RunLayout

if TYPE_CHECKING:
    from rtscore.config.pipeline import PipelineConfig

HELD_OUT = ("val", "test")
_log = logging.getLogger(__name__)


def resolve_additional_roots(cfg: PipelineConfig, run_dir: str | Path) -> list[Path]:
    """The stores of ``data.additional_roots``: relative entries against the run directory, absolute as is."""
    run = Path(run_dir)
    return [p if p.is_absolute() else run / p for p in (Path(e).expanduser() for e in cfg.data.additional_roots)]


def held_out_stores(run_dir: str | Path) -> dict[str, Path]:
    """The run's val and test stores that exist (``datasets/<split>.zarr``): what additional roots are kept from."""
    run = Path(run_dir)
    paths = {s: run / RunLayout.DATASET.at(split=s) for s in HELD_OUT}
    return {s: p for s, p in paths.items() if p.exists()}


def open_additional_roots(
    cfg: PipelineConfig,
    run_dir: str | Path,
    train_ids: Sequence[str] = (),
    held_out: Mapping[str, str | Path] | None = None,
) -> list[TileSource]:
    """Check and open every ``data.additional_roots`` store, before any training step.

    Each must be a published Zarr tile store of the train split with ``data.tile_size`` tiles, the configured
    label variant and every extra channel of ``channels.extra``, and share no tile id with ``train_ids`` (the
    train store's) or with another additional store (the same data joined twice). Each is train data, so spatial
    blocking keeps it from the ``held_out`` stores (split -> store: the run's val and test): no region of theirs,
    and no tile footprint overlapping one of theirs or within ``splits.min_distance_m`` of it
    (:func:`check_held_out`).

    Raises:
        TileStoreError: naming ``data.additional_roots[i]``, the entry and the resolved path.
        BlockingError: a root's region or tile on val/test ground, naming the root, the split and the tiles.
    """
    extra = [c.name for c in cfg.channels.extra]
    seen = {str(t): RunLayout.DATASET.at(split="train") for t in train_ids}
    sources: list[ZarrTileStore] = []
    for i, path in enumerate(resolve_additional_roots(cfg, run_dir)):
        entry = cfg.data.additional_roots[i]
        where = f"data.additional_roots[{i}] = {entry!r}"
        where += "" if Path(entry).is_absolute() else f" (resolved against the run directory: {path})"

        def fail(problem: str, where: str = where) -> TileStoreError:
            return TileStoreError(f"{where}: {problem}")

        if not path.exists():
            raise fail("does not exist; generate the store there or fix the path")
        try:
            attrs = read_store_attrs(path)
        except TileStoreError as err:
            raise fail(f"not a published tile store ({err})") from None
        if attrs.split != "train":
            raise fail(f"the store holds the {attrs.split!r} split; additional roots must be train stores")
        if attrs.tile_size != cfg.data.tile_size:
            raise fail(f"the store has {attrs.tile_size} px tiles; data.tile_size is {cfg.data.tile_size}")
        stored = list(attrs.extra_channel_names)
        missing = [c for c in extra if c not in stored]
        if missing:
            raise fail(f"the store lacks extra channels {missing} named in channels.extra (it has {stored})")
        conflicts = binding_conflicts(cfg.channels.extra, attrs.binding().bands_by_name())
        if conflicts:
            raise fail(f"the store was written with other EXTRA bands than channels.extra: {'; '.join(conflicts)}")
        if cfg.data.mask_type not in attrs.mask_types:
            raise fail(f"the store has no {cfg.data.mask_type!r} labels (data.mask_type; it has {attrs.mask_types})")
        store = ZarrTileStore(path, mask_type=cfg.data.mask_type, extra_channels=extra)
        ids = [str(t) for t in store.metadata.tile_id]
        clash = next((t for t in ids if t in seen), None)
        if clash is not None:
            raise fail(f"the store shares tile ids with {seen[clash]} (e.g. {clash!r}); is the same data joined twice?")
        seen.update(dict.fromkeys(ids, f"data.additional_roots[{i}]"))
        sources.append(store)
    if held_out:
        check_held_out(cfg, dict(zip(_where_of(cfg, run_dir), sources, strict=True)), held_out)
    opened: list[TileSource] = list(sources)
    return opened


def _where_of(cfg: PipelineConfig, run_dir: str | Path) -> list[str]:
    """``data.additional_roots[i] (<resolved path>)`` of every entry, as blocking errors name them."""
    paths = resolve_additional_roots(cfg, run_dir)
    return [f"data.additional_roots[{i}] ({p})" for i, p in enumerate(paths)]


def check_held_out(cfg: PipelineConfig, roots: Mapping[str, ZarrTileStore], held_out: Mapping[str, str | Path]) -> None:
    """Spatial blocking of additional roots (name -> opened store, train data) against ``held_out`` (split -> its
    store): no region of a val/test store, then (each root that records footprints, when the val/test stores do) no
    tile overlapping a val/test tile or within ``splits.min_distance_m`` of ground of one
    (`rtscore.data.splits.blocking`; only the pairs with a root: train<->val/test and val<->test are data
    validation's).

    Raises:
        BlockingError: naming the root, the split and the shared regions, or the pairs of tiles too close.
    """
    stores = {s: ZarrTileStore(p, mask_type=cfg.data.mask_type) for s, p in held_out.items()}
    for name, root in roots.items():
        ours = set(root.metadata.region.tolist())
        for split, store in stores.items():
            shared = sorted(ours & set(store.metadata.region.tolist()))
            if shared:
                raise BlockingError(
                    f"{name}: region(s) {shared[:5]} of this train root are in the {split} split ({held_out[split]}); "
                    "spatial blocking (guide §10.1) keeps a held-out region out of training: drop the root or its "
                    "tiles of those regions"
                )
    every = {**roots, **stores}
    footprints = {n: store_footprints(s.metadata.tile_id, s.metadata.bounds, s.crs) for n, s in every.items()}
    found = {n: f for n, f in footprints.items() if f is not None}
    crs = next((found[s][1] for s in stores if s in found), None)
    if crs is None or any(s not in found for s in stores):
        return  # val/test without footprints (synthetic): nothing to measure on the ground (validate-data says so)
    measured = [n for n in roots if n in found]
    bare = [n for n in roots if n not in found]
    if bare:
        _log.warning(f"{', '.join(bare)}: no tile footprints, so kept from val/test by region only, not on the ground")
    if not measured:
        return
    buffer = cfg.splits.min_distance_m
    report = measure_sources(found, crs, buffer, split_of=dict.fromkeys(measured, TRAIN), fresh=measured)
    problem = blocking_problem(report)
    if problem is not None:
        raise BlockingError(f"data.additional_roots break spatial blocking: {problem}")
