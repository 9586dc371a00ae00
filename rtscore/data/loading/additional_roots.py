"""``data.additional_roots``: the extra train stores joined to the run's for joint training (guide §8.3), resolved
against the run directory and each checked (split, tile size, channels and their bands, labels, no shared tile id)
before any training step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rtscore.config.binding import binding_conflicts
from rtscore.data.loading.sources import TileSource
from rtscore.data.store.format import TileStoreError, read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.storage.layout import RunLayout

if TYPE_CHECKING:
    from rtscore.config.pipeline import PipelineConfig


def resolve_additional_roots(cfg: PipelineConfig, run_dir: str | Path) -> list[Path]:
    """The stores of ``data.additional_roots``: relative entries against the run directory, absolute as is."""
    run = Path(run_dir)
    return [p if p.is_absolute() else run / p for p in (Path(e).expanduser() for e in cfg.data.additional_roots)]


def open_additional_roots(cfg: PipelineConfig, run_dir: str | Path, train_ids: Sequence[str] = ()) -> list[TileSource]:
    """Check and open every ``data.additional_roots`` store, before any training step.

    Each must be a published Zarr tile store of the train split with ``data.tile_size`` tiles, the configured
    label variant and every extra channel of ``channels.extra``, and share no tile id with ``train_ids`` (the
    train store's) or with another additional store (the same data joined twice).

    Raises:
        TileStoreError: naming ``data.additional_roots[i]``, the entry and the resolved path.
    """
    extra = [c.name for c in cfg.channels.extra]
    seen = {str(t): RunLayout.DATASET.at(split="train") for t in train_ids}
    sources: list[TileSource] = []
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
    return sources
