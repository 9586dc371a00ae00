"""Spatial blocking by geometry (guide §10.1: "no geographic overlap between splits"): tile footprints per source
(a split's store, or an additional train root), the ground distance between every two sources of different splits,
and the pairs of tiles too close.

Region names and tile ids (`rtscore.data.validation.run`) keep whole regions apart by name; this module measures the
ground itself. Footprints are axis-aligned boxes ``(minx, miny, maxx, maxy)`` in one projected CRS (tiles are on
one grid, so their bounds are their footprints): a GeoTIFF store's ``meta/bounds``
(:attr:`rtscore.data.store.reader.TileMetadata.bounds`), or a data root's rasters (:func:`data_root_footprints`).

Distances are ground metres: the projected distance between two boxes times the CRS's ground scale
(:class:`rtscore.data.raster.ground.GroundScale`: its linear unit and, in Web Mercator (EPSG:3857), ``cos(latitude)``)
at the middle of the gap between the two boxes; other projected CRSs (UTM, polar stereographic, equal-area) count as
true to scale (UTM: within 0.1 %). Candidate pairs come from a shapely STRtree over one source's footprints, queried
with the other's, never from all pairs of tiles.

The rule (:func:`measure_blocking`, :func:`check_blocking`), for every pair of sources in different splits
(train<->val, train<->test, val<->test, and each additional train root<->val and <->test): two tiles are too close
when their areas overlap; a pair with train data (the train split or an additional root) on one side must also keep
``buffer_m`` ground metres (``splits.min_distance_m``) between them. With ``buffer_m`` 0, and always between val and
test (both held out: no training data leaks across them), touching tiles (two adjacent regions on one grid:
distance 0) pass and only overlapping ones (an intersection with an area) fail.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from rtscore.data.geotiff.root import read_metadata
from rtscore.data.raster.bands import RGB_DIR
from rtscore.data.raster.ground import GroundScale
from rtscore.data.splits.regions import SplitError

Bounds = tuple[float, float, float, float]  # minx, miny, maxx, maxy in the footprints' CRS
TRAIN = "train"
SPLIT_ORDER = {"train": 0, "val": 1, "test": 2}  # sources are paired in this order: train data first
# Two footprints overlap when their intersection is wider and taller than this (CRS units: 1 mm in a metric CRS):
# tiles of one grid whose shared edge differs in the last bits of a float do not overlap.
OVERLAP_TOLERANCE = 1e-3
MAX_LISTED = 20  # pairs kept in a report and named in an error
FOOTPRINT_CRS = "footprint CRS"  # the CRS, as errors name it


class BlockingError(SplitError):
    """Two tiles of different splits overlap, or a train tile lies within the buffer of a val/test tile; or
    footprints cannot be compared. The message names both tiles, their splits (or roots) and their ground distance."""


class TilePair(BaseModel):
    """Two tiles of sources in different splits, and the ground between them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_a: str = Field(
        ..., description="The first tile's source: its split, or the additional root it comes from (train data)."
    )
    tile_a: str = Field(..., description="The first tile.")
    source_b: str = Field(..., description="The second tile's source (a split later in train, val, test).")
    tile_b: str = Field(..., description="The second tile.")
    distance_m: float = Field(..., ge=0, description="Ground distance between their footprints (0: touching).")
    overlap: bool = Field(..., description="Their footprints overlap (an intersection with an area).")

    def describe(self) -> str:
        where = "overlaps" if self.overlap else f"is {self.distance_m:.1f} m (ground) from"
        return f"{self.source_a} tile {self.tile_a} {where} {self.source_b} tile {self.tile_b}"


class PairDistance(BaseModel):
    """How close two sources of different splits come: one entry per pair kind (train<->val, val<->test, ...)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source_a: str = Field(..., description="The first source (train, an additional root, val).")
    source_b: str = Field(..., description="The second source (val, test).")
    buffer_m: float = Field(
        ...,
        ge=0,
        description="The ground distance the pair must keep: splits.min_distance_m with train data on one side, "
        "0 (no overlap) between val and test.",
    )
    min_distance_m: float | None = Field(
        ..., description="Least ground distance between a tile of each (None: a source is empty)."
    )
    closest: TilePair | None = Field(..., description="The closest pair (an overlapping one first).")
    n_too_close: int = Field(..., ge=0, description="Pairs that overlap or lie within the buffer: pairs flagged.")

    @property
    def kind(self) -> str:
        return f"{self.source_a}<->{self.source_b}"


class BlockingReport(BaseModel):
    """The spatial blocking by geometry of a set of sources: the distance between every two of different splits and
    the pairs too close (up to MAX_LISTED, closest first). ``measured`` False: there were no footprints to compare
    (``note`` says why), and the other fields are empty."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    measured: bool = Field(..., description="Footprints were compared.")
    note: str | None = Field(None, description="Why they were not (no footprints in the stores, ...).")
    crs: str | None = Field(None, description="The CRS of the footprints compared.")
    buffer_m: float = Field(
        0.0, ge=0, description="The ground distance train data must keep from val/test (splits.min_distance_m)."
    )
    sources: dict[str, str] = Field(
        default_factory=dict, description="Each source compared -> its split (an additional root: train)."
    )
    distances: list[PairDistance] = Field(
        default_factory=list, description="Every pair of sources of different splits, each with its pairs flagged."
    )
    too_close: list[TilePair] = Field(default_factory=list, description="Pairs too close, closest first (capped).")
    n_too_close: int = Field(0, ge=0, description="All pairs too close, of every pair kind.")

    @classmethod
    def not_measured(cls, note: str, buffer_m: float = 0.0) -> BlockingReport:
        return cls(measured=False, note=note, buffer_m=buffer_m)

    def summary(self) -> str:
        """One line: ``train<->val 1234.5 m (train t1, val v7); train<->test overlap (train t3, test s2); ...``."""
        if not self.measured:
            return f"not measured: {self.note}"
        parts = []
        for d in self.distances:
            if d.closest is None:
                parts.append(f"{d.kind}: no tiles")
                continue
            c = d.closest
            dist = "overlap" if c.overlap else f"{d.min_distance_m:.1f} m"
            parts.append(f"{d.kind} {dist} ({c.source_a} {c.tile_a}, {c.source_b} {c.tile_b})")
        return "; ".join(parts)


def as_bounds(values: Iterable[Any]) -> Bounds:
    """Four numbers (a row of ``meta/bounds``, a rasterio BoundingBox) as float bounds."""
    minx, miny, maxx, maxy = (float(v) for v in values)
    return minx, miny, maxx, maxy


def _gap(a: Bounds, b: Bounds) -> tuple[float, float, float, float]:
    """(dx, dy, overlap width, overlap height) of two boxes: the gaps along x and y (0 where they overlap in that
    axis), and the intersection's sides (negative where they are apart)."""
    ix = min(a[2], b[2]) - max(a[0], b[0])
    iy = min(a[3], b[3]) - max(a[1], b[1])
    return max(0.0, -ix), max(0.0, -iy), ix, iy


def _pair(ground: GroundScale, a: Bounds, b: Bounds) -> tuple[float, bool]:
    """Ground distance (m) and overlap of two footprints. The scale is taken at the middle of the gap between them
    along y (the middle of their shared rows where they overlap in y)."""
    dx, dy, ix, iy = _gap(a, b)
    overlap = ix > OVERLAP_TOLERANCE and iy > OVERLAP_TOLERANCE
    y_mid = (max(a[1], b[1]) + min(a[3], b[3])) / 2.0
    distance = 0.0 if overlap else math.hypot(dx, dy) * ground.metres_per_unit(y_mid)
    return distance, overlap


def ground_distance_m(a: Bounds, b: Bounds, crs: Any) -> float:
    """Ground distance in metres between two footprints in ``crs`` (0 when they touch or overlap)."""
    return _pair(GroundScale.of(crs, FOOTPRINT_CRS), a, b)[0]


def _boxes(footprints: Mapping[str, Bounds]) -> tuple[list[str], np.ndarray]:
    ids = list(footprints)
    arr = np.asarray([footprints[t] for t in ids], np.float64).reshape(-1, 4)
    bad = [t for t, b in zip(ids, arr, strict=True) if not (np.isfinite(b).all() and b[0] < b[2] and b[1] < b[3])]
    if bad:
        raise BlockingError(f"footprints of tiles {bad[:MAX_LISTED]} are not (minx, miny, maxx, maxy) boxes")
    return ids, arr


def _min_scale(ground: GroundScale, arrays: Iterable[np.ndarray]) -> float:
    """The least ground scale over every footprint (Web Mercator: at the largest |northing|)."""
    if not ground.web_mercator:
        return ground.unit_m
    ys = [np.abs(a[:, [1, 3]]).max() for a in arrays if a.size]
    return ground.metres_per_unit(float(max(ys))) if ys else ground.unit_m


def source_pairs(split_of: Mapping[str, str], fresh: Collection[str] | None = None) -> list[tuple[str, str]]:
    """Every pair of sources in different splits, train data first (train, then val, then test; sources of one split
    in the order given): the pairs blocking compares. ``fresh``: only the pairs with a source in it."""
    order = sorted(split_of, key=lambda s: SPLIT_ORDER.get(split_of[s], len(SPLIT_ORDER)))
    return [
        (a, b)
        for i, a in enumerate(order)
        for b in order[i + 1 :]
        if split_of[a] != split_of[b] and (fresh is None or a in fresh or b in fresh)
    ]


class _Source:
    """One source's footprints as boxes, and an STRtree over them built when first queried."""

    def __init__(self, name: str, footprints: Mapping[str, Bounds]) -> None:
        from shapely import box

        self.name = name
        self.ids, self.arr = _boxes(footprints)
        self.geoms = box(self.arr[:, 0], self.arr[:, 1], self.arr[:, 2], self.arr[:, 3])
        self._tree: Any = None

    @property
    def tree(self) -> Any:
        if self._tree is None:
            from shapely import STRtree

            self._tree = STRtree(self.geoms)
        return self._tree


def measure_blocking(
    footprints: Mapping[str, Mapping[str, Bounds]],
    crs: Any,
    buffer_m: float = 0.0,
    *,
    split_of: Mapping[str, str] | None = None,
    fresh: Collection[str] | None = None,
) -> BlockingReport:
    """The ground distance between every two sources of different splits in ``footprints`` (source -> tile id ->
    bounds, all in ``crs``), the closest pair of each, and every pair that overlaps or, with train data on one side,
    lies under ``buffer_m`` ground metres apart.

    A source is a split (``train``, ``val``, ``test``) unless ``split_of`` gives its split (an additional root:
    ``{"data.additional_roots[0]": "train"}``); sources of one split are not compared. ``fresh``: compare only the
    pairs with a source in it (tiles being added, against everything).

    The closest pair of a pair kind is the nearest in projected distance, measured in ground metres: in Web Mercator
    the scale changes by ~0.4 % over 10 km at 70° N, so only near-ties could be ordered otherwise on the ground.
    The pairs within the buffer are exact: every pair the buffer could reach is measured.

    Raises:
        BlockingError: a footprint that is not a box; a negative buffer.
        GroundSizeError: ``crs`` is not a projected CRS.
    """
    if not (buffer_m >= 0 and math.isfinite(buffer_m)):
        raise BlockingError(f"the blocking buffer must be a ground distance >= 0 m; got {buffer_m!r}")
    ground = GroundScale.of(crs, FOOTPRINT_CRS)
    splits = {s: (split_of or {}).get(s, s) for s in footprints}
    sources = {s: _Source(s, f) for s, f in footprints.items()}
    # Candidates within the buffer: a projected distance under buffer / (the least ground scale) covers them all.
    scale = _min_scale(ground, [src.arr for src in sources.values()])
    distances: list[PairDistance] = []
    too_close: list[TilePair] = []
    for a, b in source_pairs(splits, fresh):
        buffer = buffer_m if TRAIN in (splits[a], splits[b]) else 0.0
        d, close = _measure_pair(ground, sources[a], sources[b], buffer, buffer / scale)
        distances.append(d)
        too_close += close
    too_close.sort(key=_closeness)
    return BlockingReport(
        measured=True,
        crs=str(crs),
        buffer_m=float(buffer_m),
        sources=splits,
        distances=distances,
        too_close=too_close[:MAX_LISTED],
        n_too_close=len(too_close),
    )


def _measure_pair(
    ground: GroundScale, a: _Source, b: _Source, buffer_m: float, reach: float
) -> tuple[PairDistance, list[TilePair]]:
    """The closest pair of tiles of ``a`` and ``b`` and every pair too close: candidates from ``a``'s STRtree
    queried with ``b``'s footprints (within ``reach`` projected units when there is a buffer, else intersecting)."""
    if not a.ids or not b.ids:
        empty = PairDistance(
            source_a=a.name, source_b=b.name, buffer_m=buffer_m, min_distance_m=None, closest=None, n_too_close=0
        )
        return empty, []

    def pair(j: int, i: int) -> TilePair:
        d, o = _pair(ground, as_bounds(a.arr[i]), as_bounds(b.arr[j]))
        return TilePair(source_a=a.name, tile_a=a.ids[i], source_b=b.name, tile_b=b.ids[j], distance_m=d, overlap=o)

    nearest = a.tree.query_nearest(b.geoms, all_matches=True)  # every tile of a tied at the least distance
    closest = min((pair(int(j), int(i)) for j, i in nearest.T), key=_closeness)
    if buffer_m > 0:
        found = a.tree.query(b.geoms, predicate="dwithin", distance=reach)
    else:
        found = a.tree.query(b.geoms, predicate="intersects")
    close = [p for j, i in found.T if (p := pair(int(j), int(i))).overlap or p.distance_m < buffer_m]
    distance = PairDistance(
        source_a=a.name,
        source_b=b.name,
        buffer_m=buffer_m,
        min_distance_m=closest.distance_m,
        closest=closest,
        n_too_close=len(close),
    )
    return distance, close


def _closeness(p: TilePair) -> tuple[float, bool, str, str, str, str]:
    return p.distance_m, not p.overlap, p.source_a, p.tile_a, p.source_b, p.tile_b


def blocking_problem(report: BlockingReport) -> str | None:
    """The pairs too close as one message naming both tiles of each (up to 5), their sources and ground distance,
    how many each pair kind flagged, and what to do; None when none is."""
    if not report.n_too_close:
        return None
    shown = "; ".join(p.describe() for p in report.too_close[:5])
    more = f"; and {report.n_too_close - 5} more pair(s)" if report.n_too_close > 5 else ""
    kinds = ", ".join(f"{d.kind} {d.n_too_close}" for d in report.distances if d.n_too_close)
    rule = "overlap"
    if report.buffer_m > 0:
        rule += f", or (train data against val/test) lie within {report.buffer_m:g} m of ground (splits.min_distance_m)"
    return (
        f"{report.n_too_close} pair(s) of tiles of different splits {rule} ({kinds}): {shown}{more}. Spatial "
        "blocking (guide §10.1) keeps the splits' ground apart: move the region(s) to one split, drop the tiles or "
        "the additional root, or re-tile"
    )


def check_blocking(
    footprints: Mapping[str, Mapping[str, Bounds]],
    crs: Any,
    buffer_m: float = 0.0,
    *,
    split_of: Mapping[str, str] | None = None,
    fresh: Collection[str] | None = None,
) -> BlockingReport:
    """:func:`measure_blocking`, raising when two tiles of different splits overlap, or a tile of train data lies
    within ``buffer_m`` of a val/test tile.

    Raises:
        BlockingError: naming both tiles of the closest pairs, their sources and their ground distance.
    """
    report = measure_blocking(footprints, crs, buffer_m, split_of=split_of, fresh=fresh)
    problem = blocking_problem(report)
    if problem is not None:
        raise BlockingError(problem)
    return report


SourceFootprints = tuple[Mapping[str, Bounds], str | None]  # a source's tile id -> bounds, and their CRS


def store_footprints(tile_ids: Iterable[Any], bounds: np.ndarray | None, crs: str | None) -> SourceFootprints | None:
    """A store's footprints (its ``meta/bounds`` rows by tile id) and CRS; None when it records none (synthetic
    stores, stores written before footprints were recorded)."""
    if bounds is None:
        return None
    return {str(t): as_bounds(b) for t, b in zip(tile_ids, bounds, strict=True)}, crs


def measure_sources(
    sources: Mapping[str, SourceFootprints],
    crs: str,
    buffer_m: float = 0.0,
    *,
    split_of: Mapping[str, str] | None = None,
    fresh: Collection[str] | None = None,
) -> BlockingReport:
    """:func:`measure_blocking` of sources each in its own CRS, every one reprojected into ``crs`` first (a source
    without a CRS is taken to be in ``crs``)."""
    by_source = {s: reproject_footprints(fp, c or crs, crs) for s, (fp, c) in sources.items()}
    return measure_blocking(by_source, crs, buffer_m, split_of=split_of, fresh=fresh)


def reproject_footprints(footprints: Mapping[str, Bounds], src: Any, dst: Any) -> dict[str, Bounds]:
    """Footprints in CRS ``src`` as boxes in ``dst`` (each the box enclosing the reprojected one, densified)."""
    from rasterio.crs import CRS
    from rasterio.warp import transform_bounds

    a, b = CRS.from_user_input(src), CRS.from_user_input(dst)
    if a == b:
        return dict(footprints)
    return {t: as_bounds(transform_bounds(a, b, *f, densify_pts=21)) for t, f in footprints.items()}


def data_root_footprints(
    root: str | Path, splits: Mapping[str, str]
) -> tuple[dict[str, dict[str, Bounds]], str | None]:
    """The footprints of a GeoTIFF data root's tiles, by split, read from the headers of ``PLANET-RGB/<id>.tif``
    (no pixel is read), and their CRS (None when no tile is selected): for checking a root before training
    (:func:`check_blocking`).

    Args:
        root: A local data root (docs/geotiff.md); its metadata.csv gives each tile's RegionName.
        splits: Region -> split. Tiles of a region not in it are left out.

    Raises:
        BlockingError: a tile's raster is missing or unreadable, has no CRS, or is in another CRS than the rest;
            each names the tile and the file.
        GeotiffError: metadata.csv is missing or malformed.
    """
    import rasterio
    from rasterio.errors import RasterioIOError

    root = Path(root)
    out: dict[str, dict[str, Bounds]] = {s: {} for s in dict.fromkeys(splits.values())}
    crs: Any = None
    first = ""
    for row in read_metadata(root):
        split = splits.get(row["RegionName"])
        if split is None:
            continue
        tid = row["Tile_id"]
        path = root / RGB_DIR / f"{tid}.tif"
        try:
            with rasterio.open(path) as src:
                bounds, tile_crs = src.bounds, src.crs
        except RasterioIOError as err:
            raise BlockingError(f"tile {tid} ({path}): cannot read its footprint ({err})") from None
        if tile_crs is None:
            raise BlockingError(f"tile {tid} ({path}): has no CRS, so no footprint on the ground")
        if crs is None:
            crs, first = tile_crs, tid
        elif tile_crs != crs:
            raise BlockingError(
                f"tile {tid} ({path}): CRS {tile_crs.to_string()}, but tile {first} is in {crs.to_string()}; a data "
                "root's tiles share one grid (rts tile)"
            )
        out[split][tid] = as_bounds(bounds)  # left, bottom, right, top
    return out, None if crs is None else str(crs.to_string())
