"""The logit-statistics cache: one inference pass over Val-Realistic feeds every post-training decision.

For each candidate deployment configuration (TTA x scale set x fusion) the pass keeps, per tile, histograms of
the fused logits split by label: label-0 pixels, label-1 pixels, and label-1 pixels of *large* RTS (bounding
box longer than `calibration.large_rts_bbox_m`). PR curves, PR-AUC at any prevalence ratio, NLL and ECE under
any temperature, thresholds and FP rates all reduce from these, so no decision re-runs the model. Its size
grows with tiles x bins x configurations, not with pixels.

Object metrics need pixels, so full-resolution logits are kept only where objects can exist at a plausible
threshold: tiles with ground-truth RTS, or with any pixel at or above `calibration.object_prob_floor` in some
configuration. They are stored per (scale, TTA) in float16, and every fused configuration is rebuilt from them.

A scale below 1.0 is cached only from a context-expanded input (each tile's 2x field of view, paired by tile
id, guide §8.3); without one only [1.0] is cached and ``scales_not_evaluated`` says why.

Layout (Zarr v3, `calibration/seed_<n>/logit_cache.zarr`):
    hist        (configs, tiles, 3, n_bins) uint32   rows: neg, pos, pos_large; one chunk per loader batch;
                n_bins = the core (metrics.pr_bins) plus tails and overflow bins (`LogitBins`, attrs["bins"]);
                read back chunk by chunk (`LogitCache.hist_blocks`), never one configuration at once
    tile_id, region, is_positive   (tiles,)
    pixel_area_m2 (tiles,) float64      each tile's ground m² per pixel: the large-RTS rule's side in pixels
    dense/row     (S,) int64            tile row of each kept tile
    dense/logits  (S, maps, H, W) f16   per (scale, TTA) logits at native resolution (attrs["maps"])
    dense/labels  (S, H, W) uint8
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import CalibrationConfig, PipelineConfig
from rtscore.errors import PipelineError
from rtscore.inference.numerics import (
    D4,
    TTA_TRANSFORMS,
    fuse_scales,
    prepare_model,
    scale_logits,
    tta_cost,
    tta_logits,
)
from rtscore.metrics import ClassSumAccumulator, ClassSums, LogitBins, TileHistograms, tile_counts
from rtscore.metrics.objects import EIGHT_CONNECTED
from rtscore.metrics.pixel import prob_to_logit
from rtscore.storage import staged_dir

if TYPE_CHECKING:
    import zarr

# /2: the bins gained geometric tails and overflow bins (attrs["bins"] names core_bins and tail_octaves); a /1
# cache clamped every logit beyond ±16 into one bin, so it is refused, never reinterpreted.
CACHE_FORMAT = "rts-logit-cache/2"
_NEG, _POS, _POS_LARGE = 0, 1, 2


class CacheError(PipelineError):
    """The logit cache is missing, incomplete, or was computed for other numerics."""


@dataclass(frozen=True)
class Combo:
    """One deployment configuration the cache describes: TTA, scale set and (multi-scale only) fusion."""

    tta: str
    scales: tuple[float, ...]
    fusion: str = "weighted_mean"

    @property
    def key(self) -> str:
        scales = "+".join(f"{s:g}" for s in self.scales)
        return f"tta={self.tta};scales={scales}" + (f";fusion={self.fusion}" if len(self.scales) > 1 else "")

    @property
    def cost(self) -> float:
        """Forward-pass cost relative to one native pass (a 0.5x pass is one tile-sized pass too: its input is the
        tile's 2x field of view downsampled to the tile size)."""
        return float(tta_cost(self.tta) * len(self.scales))

    @classmethod
    def of(cls, dep: DeploymentConfig) -> Combo:
        scales = tuple(dep.scales)
        return cls(dep.tta, scales, dep.fusion if len(scales) > 1 else "weighted_mean")


def candidate_combos(cal: CalibrationConfig, scales: Sequence[float] | None = None) -> list[Combo]:
    """Every configuration the gates may choose: each TTA at [1.0], and at all `scales` (default
    `cal.scale_candidates`; the cached ones, see :func:`build_logit_cache`) with each fusion."""
    scales = list(cal.scale_candidates if scales is None else scales)
    combos = []
    for t in cal.tta_candidates:
        combos.append(Combo(t, (1.0,)))
        if len(scales) > 1:
            combos += [Combo(t, tuple(scales), f) for f in cal.fusion_candidates]
    return combos


def large_side_px(large_rts_bbox_m: float, pixel_area_m2: float) -> float:
    """The large-RTS rule in pixels of one tile: its bounding box's longer side beyond ``large_rts_bbox_m`` ground
    metres, with the tile's own ground pixel side ``sqrt(pixel_area_m2)`` (tiles differ in pixel size)."""
    return float(large_rts_bbox_m / math.sqrt(pixel_area_m2))


def large_positive_mask(label: np.ndarray, min_side_px: float) -> np.ndarray:
    """Label-1 pixels of 8-connected RTS whose bounding box's longer side exceeds `min_side_px` pixels."""
    from scipy import ndimage

    lab, n = ndimage.label(label == 1, structure=EIGHT_CONNECTED)
    if n == 0:
        return np.zeros(label.shape, bool)
    big = np.zeros(n + 1, bool)
    for i, sl in enumerate(ndimage.find_objects(lab), start=1):
        if sl is not None and max(sl[0].stop - sl[0].start, sl[1].stop - sl[1].start) > min_side_px:
            big[i] = True
    return big[lab]


def _large_targets(labels: np.ndarray, min_side_px: Sequence[float]) -> np.ndarray:
    """Targets whose label-1 pixels outside large RTS become ignore: the 'pos' row then counts large RTS only
    (``min_side_px``: the rule in pixels of each tile)."""
    out = labels.copy()
    for i in range(labels.shape[0]):
        small = (labels[i] == 1) & ~large_positive_mask(labels[i], min_side_px[i])
        out[i][small] = 255
    return out


def build_logit_cache(
    model: Any,
    loader: Any,
    cfg: PipelineConfig,
    out: Path,
    *,
    n_tiles: int,
    attrs: dict[str, Any] | None = None,
    progress: bool = False,
    scales: Sequence[float] | None = None,
    scales_note: str | None = None,
) -> Path:
    """One pass over the loader per (scale, transform); writes the cache at `out` atomically.

    Args:
        model: The EMA model on its device (eval mode is set here).
        loader: Sequential (unshuffled) loader of the validation dataset, yielding image/label/tile_id/region and
            each tile's ``pixel_area_m2`` (the large-RTS rule is in ground metres of each tile).
        cfg: Pipeline config: calibration candidates, metrics.pr_bins, deployment precision and torch_compile.
        out: Cache path (`.../logit_cache.zarr`); replaced only once complete.
        n_tiles: Tiles the loader yields.
        attrs: Provenance stored with the cache (weights and dataset fingerprints, seed).
        scales: The scales to cache (default ``calibration.scale_candidates``); a scale below 1.0 needs the
            loader to yield each tile's ``context`` (:class:`~rtscore.inference.context.ContextPairedDataset`).
        scales_note: Why candidate scales were left out (recorded as ``scales_not_evaluated``).
    """
    import torch
    import zarr

    plan = _CachePlan.of(cfg, scales)
    device = next(model.parameters()).device
    run_model = prepare_model(model, cfg.deployment.torch_compile)
    tiles = _TileColumns()
    with staged_dir(out) as tmp:
        g = zarr.open_group(str(tmp), mode="w", zarr_format=3)
        hist = _create_hist(g, plan, n_tiles, int(loader.batch_size or 1))
        dense = _DenseLogits(g.create_group("dense"), len(plan.maps))
        it = _with_progress(loader, plan) if progress else loader
        with torch.inference_mode():
            for batch in it:
                _cache_batch(plan, run_model, device, batch, n_tiles, hist, dense, tiles)
        if tiles.n != n_tiles:
            raise CacheError(f"the loader yielded {tiles.n} tiles, {n_tiles} announced")
        tiles.write(g, n_tiles)
        g.attrs.update({**plan.attrs(cfg, n_tiles, scales_note), **(attrs or {})})
    return out


def _create_hist(g: Any, plan: _CachePlan, n_tiles: int, batch_size: int) -> Any:
    """The cache's ``hist`` array, (combos, tiles, 3, bins) uint32 counts, chunked one combo by one loader batch
    so that each batch writes whole chunks."""
    return g.create_array(
        "hist",
        shape=(len(plan.combos), n_tiles, 3, plan.bins.n_bins),
        chunks=(1, batch_size, 3, plan.bins.n_bins),
        dtype="uint32",
        compressors=_blosc(),
        fill_value=0,
    )


def _with_progress(loader: Any, plan: _CachePlan) -> Any:
    """The loader wrapped in a tqdm bar naming the pass's size (tqdm imported only when a bar is asked for)."""
    from tqdm import tqdm

    return tqdm(loader, desc=f"logit cache ({len(plan.transforms)} transforms x {len(plan.scales)} scales)")


def _cache_batch(
    plan: _CachePlan,
    run_model: Any,
    device: Any,
    batch: dict[str, Any],
    n_tiles: int,
    hist: Any,
    dense: _DenseLogits,
    tiles: _TileColumns,
) -> None:
    """One loader batch into the cache at the next rows: its histograms for every combo, the dense logits of the
    tiles worth keeping (hot, or with a positive pixel) and its tiles' columns.

    Raises:
        CacheError: the loader yields more tiles than announced (checked before anything of the batch is written).
    """
    row = tiles.n
    y = batch["label"].numpy().astype(np.uint8)
    if row + len(y) > n_tiles:
        raise CacheError(f"the loader yielded more than the {n_tiles} tiles announced")
    areas = [float(a) for a in batch["pixel_area_m2"]]  # each tile's ground pixel (large-RTS rule)
    per_map = plan.logit_maps(run_model, batch, device)
    hist[:, row : row + len(y)], hot = plan.histograms(per_map, y, areas, batch["tile_id"])
    keep = np.flatnonzero(hot | (y == 1).reshape(len(y), -1).any(axis=1))
    if keep.size:
        dense.append(row + keep, [per_map[m] for m in plan.maps], keep, y[keep])
    tiles.add(batch, y, areas)


def _blosc() -> Any:
    from zarr.codecs import BloscCodec

    return BloscCodec(cname="zstd", clevel=3, shuffle="bitshuffle")


@dataclass(frozen=True)
class _CachePlan:
    """What one pass computes: the candidate configurations, the (scale, TTA) maps kept dense, the D4 transforms
    the TTA candidates need, the bins and the logit floor of a tile worth keeping dense."""

    cal: CalibrationConfig
    precision: str
    scales: list[float]
    combos: list[Combo]
    transforms: list[str]
    maps: list[tuple[float, str]]
    bins: LogitBins
    floor_logit: float

    @classmethod
    def of(cls, cfg: PipelineConfig, scales: Sequence[float] | None) -> _CachePlan:
        cal = cfg.calibration
        scale_list = list(cal.scale_candidates if scales is None else scales)
        needed = {t for tta in cal.tta_candidates for t in TTA_TRANSFORMS[tta]}
        return cls(
            cal=cal,
            precision=cfg.deployment.precision,
            scales=scale_list,
            combos=candidate_combos(cal, scale_list),
            transforms=[t for t in D4 if t in needed],
            maps=[(s, t) for s in scale_list for t in cal.tta_candidates],
            bins=LogitBins(core_bins=cfg.metrics.pr_bins),
            floor_logit=prob_to_logit(cal.object_prob_floor),
        )

    def logit_maps(self, run_model: Any, batch: Any, device: Any) -> dict[tuple[float, str], Any]:
        """The batch's logits per (scale, TTA candidate), on ``device``."""
        x = batch["image"].to(device)
        ctx = batch["context"].to(device) if "context" in batch else None
        per_map: dict[tuple[float, str], Any] = {}
        for s in self.scales:
            logits = scale_logits(run_model, x, s, self.transforms, self.precision, ctx)
            for t in self.cal.tta_candidates:
                per_map[(s, t)] = tta_logits(logits, t)
        return per_map

    def histograms(
        self, per_map: dict[tuple[float, str], Any], y: np.ndarray, areas: list[float], tile_ids: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray]:
        """Per configuration and tile, the histograms of the fused logits (rows neg, pos, pos_large), and which
        tiles reach the logit floor in some configuration."""
        b = y.shape[0]
        y_large = _large_targets(y, [large_side_px(self.cal.large_rts_bbox_m, a) for a in areas])
        block = np.empty((len(self.combos), b, 3, self.bins.n_bins), np.uint32)
        hot = np.zeros(b, bool)
        for c, combo in enumerate(self.combos):
            z = fuse_scales([per_map[(s, combo.tta)] for s in combo.scales], combo.fusion).cpu().numpy()
            counts = tile_counts(z, y, self.bins, tile_ids)
            large = tile_counts(z, y_large, self.bins, tile_ids)
            block[c, :, _NEG] = counts[:, 0]
            block[c, :, _POS] = counts[:, 1]
            block[c, :, _POS_LARGE] = large[:, 1]
            hot |= (z >= self.floor_logit).reshape(b, -1).any(axis=1)
        return block, hot

    def attrs(self, cfg: PipelineConfig, n_tiles: int, scales_note: str | None) -> dict[str, Any]:
        """What the cache was computed with: its format, numerics, bins, candidates and rules."""
        cal, dep, bins = self.cal, cfg.deployment, self.bins
        return {
            "format": CACHE_FORMAT,
            "precision": dep.precision,
            "torch_compile": dep.torch_compile,
            "bins": {
                "core_bins": bins.core_bins,
                "lo": bins.lo,
                "hi": bins.hi,
                "tail_octaves": bins.tail_octaves,
                "n_bins": bins.n_bins,
            },
            "combos": [c.key for c in self.combos],
            "tta_candidates": list(cal.tta_candidates),
            "scale_candidates": self.scales,
            "scales_not_evaluated": scales_note,
            "fusion_candidates": list(cal.fusion_candidates),
            "maps": [[s, t] for s, t in self.maps],
            "large_rts_bbox_m": cal.large_rts_bbox_m,
            "object_prob_floor": cal.object_prob_floor,
            "n_tiles": n_tiles,
        }


class _DenseLogits:
    """``dense/``: the full-resolution float16 logits of every (scale, TTA) map and the labels of the kept tiles,
    with each one's tile row; the arrays are created at the first kept tile (their tile size)."""

    def __init__(self, group: zarr.Group, n_maps: int) -> None:
        self.group = group
        self.n_maps = n_maps
        self.row = group.create_array("row", shape=(0,), chunks=(1024,), dtype="int64")
        self.logits: zarr.Array | None = None
        self.labels: zarr.Array | None = None

    def append(self, rows: np.ndarray, maps: list[Any], keep: np.ndarray, labels: np.ndarray) -> None:
        """Tiles ``keep`` of the batch (tile rows ``rows``): the maps' logits stacked per tile, and their labels."""
        stack = np.stack([m.cpu().numpy() for m in maps], axis=1)[keep].astype(np.float16)
        h, w = labels.shape[1:]
        if self.logits is None or self.labels is None:
            self.logits = self.group.create_array(
                "logits",
                shape=(0, self.n_maps, h, w),
                chunks=(1, self.n_maps, h, w),
                dtype="float16",
                compressors=_blosc(),
            )
            self.labels = self.group.create_array(
                "labels", shape=(0, h, w), chunks=(1, h, w), dtype="uint8", compressors=_blosc()
            )
        n0 = self.row.shape[0]
        for arr in (self.row, self.logits, self.labels):
            arr.resize((n0 + keep.size, *arr.shape[1:]))
        self.row[n0:] = rows
        self.logits[n0:] = stack
        self.labels[n0:] = labels


@dataclass
class _TileColumns:
    """The per-tile columns of the cache, gathered batch by batch: tile id, region, positive, ground pixel area."""

    tile_ids: list[str] = field(default_factory=list)
    regions: list[str] = field(default_factory=list)
    positive: list[bool] = field(default_factory=list)
    pixel_areas: list[float] = field(default_factory=list)

    @property
    def n(self) -> int:
        return len(self.tile_ids)

    def add(self, batch: Any, y: np.ndarray, areas: list[float]) -> None:
        self.tile_ids += [str(t) for t in batch["tile_id"]]
        self.regions += [str(r) for r in batch["region"]]
        self.pixel_areas += areas
        self.positive += list((y == 1).reshape(y.shape[0], -1).any(axis=1))

    def write(self, g: zarr.Group, n_tiles: int) -> None:
        for name, values, dtype in (("tile_id", self.tile_ids, "str"), ("region", self.regions, "str")):
            g.create_array(name, shape=(n_tiles,), dtype=dtype, compressors=None)[:] = np.asarray(values, dtype=object)
        g.create_array("is_positive", shape=(n_tiles,), dtype="bool")[:] = np.asarray(self.positive, bool)
        g.create_array("pixel_area_m2", shape=(n_tiles,), dtype="float64")[:] = np.asarray(self.pixel_areas, np.float64)


# Bytes of histograms one read of the cache brings into memory (whole chunks, at least one): the decisions'
# memory is this plus the class sums, whatever the number of tiles (a 32-tile chunk of 3330 bins is 1.3 MB).
HIST_READ_BYTES = 32 << 20


@dataclass(frozen=True, eq=False)
class CachedSums:
    """One configuration's pool as class sums: `hist` over all pixels, and `large`, the same pool with only the
    large-RTS pixels positive (its negatives and tile flags are `hist`'s). All the gates, the temperature and the
    thresholds need; built by :meth:`LogitCache.sums` chunk by chunk, or from per-tile histograms (`of_tiles`)."""

    hist: ClassSums
    large: ClassSums

    @property
    def has_large(self) -> bool:
        return bool(self.large.pos.any())

    @classmethod
    def of_tiles(cls, h: TileHistograms, pos_large: np.ndarray) -> CachedSums:
        """The sums of per-tile histograms ``h`` and their (T, n_bins) large-RTS positive counts."""
        pooled = h.pooled
        large = ClassSumAccumulator(h.bins)
        large.add(pos_large, h.neg, h.is_positive)
        return cls(pooled, large.result())


@dataclass(frozen=True, eq=False)
class HistBlock:
    """A block of consecutive tiles of one configuration, as the cache stores them (whole chunks).

    Attributes:
        start: Row of the block's first tile.
        pos: (B, n_bins) uint32 label-1 counts; neg: label-0 counts; pos_large: label-1 counts of large RTS.
        is_positive: (B,) bool, the tile has a label-1 pixel.
    """

    start: int
    pos: np.ndarray
    neg: np.ndarray
    pos_large: np.ndarray
    is_positive: np.ndarray


class LogitCache:
    """Read side of the cache (no model, no torch)."""

    def __init__(self, path: str | Path) -> None:
        import zarr

        self.path = Path(path)
        try:
            self._group = zarr.open_group(str(self.path), mode="r")
        except Exception as err:  # FileNotFoundError, or zarr's own for a non-group
            raise CacheError(
                f"no logit cache at {self.path} ({type(err).__name__}); run the logit-cache stage"
            ) from None
        self.attrs: dict[str, Any] = dict(self._group.attrs)
        found = self.attrs.get("format")
        if found != CACHE_FORMAT:
            raise CacheError(
                f"{self.path} is a logit cache of format {found!r}, this code reads {CACHE_FORMAT!r} (older caches "
                "tied every logit beyond ±16 in one bin); run the logit-cache stage again, it replaces the cache"
                if isinstance(found, str) and found.startswith("rts-logit-cache/")
                else f"{self.path} is not a logit cache of format {CACHE_FORMAT!r}"
            )
        b = self.attrs["bins"]
        self.bins = LogitBins(
            core_bins=int(b["core_bins"]), lo=float(b["lo"]), hi=float(b["hi"]), tail_octaves=int(b["tail_octaves"])
        )
        if self.bins.n_bins != int(b["n_bins"]):
            raise CacheError(
                f"the logit cache {self.path} holds {b['n_bins']} bins per histogram, its binning {b} has "
                f"{self.bins.n_bins} here; run the logit-cache stage again"
            )
        self.keys: list[str] = list(self.attrs["combos"])

    def _array(self, name: str) -> zarr.Array:
        """The cache's array `name` (zarr types a member as array or group)."""
        import zarr

        node = self._group[name]
        if not isinstance(node, zarr.Array):
            raise CacheError(f"the logit cache {self.path}: {name!r} is not an array; rebuild the cache")
        return node

    def _subgroup(self, name: str) -> zarr.Group:
        """The cache's group `name`."""
        import zarr

        node = self._group[name]
        if not isinstance(node, zarr.Group):
            raise CacheError(f"the logit cache {self.path}: {name!r} is not a group; rebuild the cache")
        return node

    @property
    def n_tiles(self) -> int:
        return int(self.attrs["n_tiles"])

    @cached_property
    def tile_ids(self) -> tuple[str, ...]:
        return tuple(str(t) for t in np.asarray(self._array("tile_id")[:]))

    @cached_property
    def regions(self) -> tuple[str, ...]:
        return tuple(str(r) for r in np.asarray(self._array("region")[:]))

    @cached_property
    def is_positive(self) -> np.ndarray:
        return np.asarray(self._array("is_positive")[:], bool)

    @cached_property
    def pixel_area_m2(self) -> np.ndarray:
        """(tiles,) each tile's ground m² per pixel (the object-size rule and the large-RTS rule are in m²)."""
        if "pixel_area_m2" not in self._group:
            raise CacheError(
                f"the logit cache {self.path} records no per-tile pixel areas (written before they were); run the "
                "logit-cache stage again, it replaces the cache"
            )
        return np.asarray(self._array("pixel_area_m2")[:], np.float64)

    def index(self, combo: Combo) -> int:
        try:
            return self.keys.index(combo.key)
        except ValueError:
            raise CacheError(
                f"the logit cache {self.path} has no configuration {combo.key}; it holds {self.keys}"
            ) from None

    def hist_blocks(self, combo: Combo) -> Iterator[HistBlock]:
        """One configuration's per-tile histograms in blocks of whole chunks of at most `HIST_READ_BYTES` (one chunk
        when a chunk is larger): memory is one block, whatever the number of tiles."""
        arr, flags = self._array("hist"), self._array("is_positive")
        c = self.index(combo)
        chunk_tiles = int(arr.chunks[1])
        chunk_bytes = chunk_tiles * math.prod(arr.shape[2:]) * arr.dtype.itemsize
        step = max(1, HIST_READ_BYTES // max(chunk_bytes, 1)) * chunk_tiles
        for start in range(0, self.n_tiles, step):
            stop = min(self.n_tiles, start + step)
            block = np.asarray(arr[c, start:stop])
            yield HistBlock(
                start, block[:, _POS], block[:, _NEG], block[:, _POS_LARGE], np.asarray(flags[start:stop], bool)
            )

    def sums(self, combo: Combo) -> CachedSums:
        """One configuration's class sums (all pixels, and large RTS only), streamed chunk by chunk: what the
        gates, the temperature fit and the thresholds read. Exactly the sums of :meth:`tile_hist`."""
        acc = ClassSumAccumulator(self.bins)
        pos_large = np.zeros(self.bins.n_bins, np.int64)
        for b in self.hist_blocks(combo):
            acc.add(b.pos, b.neg, b.is_positive)
            pos_large += b.pos_large.sum(axis=0, dtype=np.int64)
        pooled = acc.result()
        return CachedSums(pooled, replace(pooled, pos=pos_large))

    def tile_hist(self, combo: Combo) -> TileHistograms:
        """One configuration's per-tile histograms, all in memory (tiles x n_bins x 2 uint32: 2.7 GB at 100,000
        tiles): for per-tile questions (tests, diagnostics); the decisions read :meth:`sums`."""
        blocks = list(self.hist_blocks(combo))
        n = self.bins.n_bins
        pos = np.concatenate([b.pos for b in blocks]) if blocks else np.zeros((0, n), np.uint32)
        neg = np.concatenate([b.neg for b in blocks]) if blocks else np.zeros((0, n), np.uint32)
        n_valid = pos.sum(axis=1, dtype=np.int64) + neg.sum(axis=1, dtype=np.int64)
        return TileHistograms(self.bins, pos, neg, self.tile_ids, self.is_positive, n_valid)

    def dense_tiles(self, combo: Combo) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """(tile row, fused float32 logits (H, W), labels (H, W)) for every tile kept at full resolution."""
        import torch

        if "logits" not in self._subgroup("dense"):
            return
        maps = [(float(s), str(t)) for s, t in self.attrs["maps"]]
        idx = [maps.index((s, combo.tta)) for s in combo.scales]
        rows = np.asarray(self._array("dense/row")[:])
        logits, labels = self._array("dense/logits"), self._array("dense/labels")
        for i, r in enumerate(rows):
            stack = np.asarray(logits[i]).astype(np.float32)
            z = fuse_scales([torch.from_numpy(stack[j]) for j in idx], combo.fusion).numpy()
            yield int(r), z, np.asarray(labels[i])

    def nbytes(self) -> dict[str, int]:
        """Bytes on disk of the histogram part and the full-resolution part."""

        def size(p: Path) -> int:
            return sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.exists() else 0

        return {"hist": size(self.path / "hist"), "dense": size(self.path / "dense"), "total": size(self.path)}
