"""The data validation's store checks (docs/store-format.md): a store's per-tile records and counts agree with its
stored pixels.

Two parts, both cheap: the records alone (``meta/``: kind, ``is_positive``, pixel counts; the store's ``counts``
attribute), read without any pixel chunk; and the pixels of every tile the split's DataLoader pass reads anyway
(:class:`StoredPixelAudit`, fed the facts :class:`~rtscore.data.loading.dataset.TileDataset` computes beside each
sample), plus the full-NoData tiles that pass skips (all-zero chunks: next to nothing to decode).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from rtscore.data.loading.sources import TileSource
from rtscore.data.store.format import read_array, zarr_group
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.tiles import KIND_CODES, nodata_breaches
from rtscore.data.validation.report import CheckLog

_KIND_NAMES = {code: name for name, code in KIND_CODES.items()}
_SHOWN = 5  # tiles named in one check's detail (the first; the count says how many in all)


def _named(problems: list[tuple[str, str]]) -> str:
    shown = "; ".join(f"tile {tid}: {why}" for tid, why in problems[:_SHOWN])
    more = f"; and {len(problems) - _SHOWN} more tile(s)" if len(problems) > _SHOWN else ""
    return f"{len(problems)} tile(s): {shown}{more}"


def check_store_records(store: ZarrTileStore, split: str, out: CheckLog) -> bool:
    """The records of every tile against each other and the store's counts, without a pixel read.

    Per tile: a tile without a valid pixel (``n_nodata_px`` = H x W) holds no label-1 pixel; every NoData pixel
    is ignored (``n_ignore_px >= n_nodata_px``: NoData pixels hold label 255); ``kind`` and ``is_positive`` are
    what those counts say (full NoData, else positive with a label-1 pixel, else negative). The store: its
    ``counts`` attribute is the partition of the kinds (positive + negative + full NoData = tiles).
    """
    import zarr

    meta = zarr_group(zarr.open_group(str(store.path), mode="r"), "meta")
    ids = read_array(meta, "tile_id").astype(object)
    kind = read_array(meta, "kind").astype(np.int64)
    flag = read_array(meta, "is_positive").astype(bool)
    n_pos = read_array(meta, "n_positive_px").astype(np.int64)  # exact labels, as is_positive and kind
    n_nodata = read_array(meta, "n_nodata_px").astype(np.int64)
    n_ignore = read_array(meta, "n_ignore_px").astype(np.int64)
    full = n_nodata >= store.tile_size * store.tile_size
    expected = np.where(full, KIND_CODES["full_nodata"], np.where(n_pos > 0, KIND_CODES["positive"], 0))
    problems: list[tuple[str, str]] = []
    for i in np.flatnonzero((kind != expected) | (flag != (expected == 1)) | (n_ignore < n_nodata)):
        why = []
        if full[i] and n_pos[i]:
            why.append(f"no valid pixel but {n_pos[i]} label-1 pixel(s) (NoData pixels must hold label 255)")
        elif n_ignore[i] < n_nodata[i]:
            why.append(f"{n_nodata[i]} NoData pixels but {n_ignore[i]} labelled 255 (NoData pixels must hold 255)")
        if kind[i] != expected[i]:
            stored = _KIND_NAMES.get(int(kind[i]), str(kind[i]))
            why.append(f"kind {stored}, its pixels make it {_KIND_NAMES[int(expected[i])]}")
        if flag[i] != (expected[i] == 1):
            why.append(f"is_positive {bool(flag[i])}, its pixels say {bool(expected[i] == 1)}")
        problems.append((str(ids[i]), ", ".join(why)))
    ok = out.add(
        "tile_records",
        not problems,
        f"{_named(problems)}; regenerate the store" if problems else f"{len(ids)} tiles: flags agree with the pixels",
        split,
        problems[0][0] if problems else None,
    )
    counts = store.attrs.counts  # as recorded: not necessarily a partition (StoreAttrs.as_recorded)
    actual = {name: int((kind == code).sum()) for name, code in KIND_CODES.items()}
    recorded = {name: int(getattr(counts, f"n_{name}")) for name in KIND_CODES}
    wrong = [f"n_{k} {recorded[k]} (its tiles: {actual[k]})" for k in KIND_CODES if recorded[k] != actual[k]]
    if counts.n_tiles != len(ids):
        wrong.append(f"n_tiles {counts.n_tiles} (the store holds {len(ids)})")
    return (
        out.add(
            "store_counts",
            not wrong,
            f"the store's counts disagree with its tiles: {', '.join(wrong)}; regenerate the store"
            if wrong
            else f"{len(ids)} tiles = {actual['positive']} positive + {actual['negative']} negative + "
            f"{actual['full_nodata']} full NoData",
            split,
        )
        and ok
    )


class StoredPixelAudit:
    """The stored pixels of the tiles a DataLoader pass reads, held against their records: NoData pixels hold
    RGB 0, EXTRA 0 and label 255; the label-1 pixels are ``n_positive_px`` (of the label variant read)."""

    def __init__(self, store: ZarrTileStore) -> None:
        self.meta = store.metadata
        self.problems: list[tuple[str, str]] = []

    def add_batch(self, batch: Mapping[str, Any]) -> None:
        """The facts :class:`~rtscore.data.loading.dataset.TileDataset` gave with ``stored_facts`` for one batch."""
        for k, tid in enumerate(batch["tile_id"]):
            self._add(
                int(batch["index"][k]),
                str(tid),
                int(batch["stored_positive_px"][k]),
                int(batch["stored_nodata_breaches"][k]),
            )

    def add_skipped(self, store: ZarrTileStore) -> None:
        """The full-NoData tiles the pass skips (excluded from every batch), read here."""
        for i in np.flatnonzero(self.meta.full_nodata):
            s = store[int(i)]
            self._add(int(i), s.tile_id, int((s.label == 1).sum()), nodata_breaches(s.rgb, s.extra, s.alpha, s.label))

    def _add(self, i: int, tid: str, positive_px: int, breaches: int) -> None:
        why = []
        if breaches:
            why.append(f"{breaches} NoData pixel(s) hold RGB, EXTRA or a label other than 0, 0, 255")
        if positive_px != int(self.meta.n_positive_px[i]):
            why.append(f"{positive_px} label-1 pixels, its record says {int(self.meta.n_positive_px[i])}")
        if why:
            self.problems.append((tid, ", ".join(why)))

    def report(self, split: str, out: CheckLog, tiles: int) -> bool:
        p = self.problems
        return out.add(
            "stored_pixels",
            not p,
            f"{_named(p)}; regenerate the store" if p else f"{tiles} tiles: NoData pixels hold 0 and label 255",
            split,
            p[0][0] if p else None,
        )


def stored_full_nodata(source: TileSource) -> Callable[[int], bool]:
    """Whether the tile at a source index is full NoData as stored (its record; a source without records: its
    alpha), the judge of "a full-NoData tile reached a batch" whatever augmentation did to the sample."""
    meta = getattr(source, "metadata", None)
    if meta is not None:
        full = np.asarray(meta.full_nodata, bool)
        return lambda i: bool(full[i])
    return lambda i: not bool((source[i].alpha > 0).any())
