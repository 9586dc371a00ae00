"""Spatial blocking by geometry (guide §10.1: "no geographic overlap between splits"): tile footprints per split,
the ground distance between the train split and each other split, and the train tiles too close to a val/test tile.

Region names and tile ids (`rtscore.data.validation.run`) keep whole regions apart by name; this module measures the
ground itself. Footprints are axis-aligned boxes ``(minx, miny, maxx, maxy)`` in one projected CRS (tiles are on
one grid, so their bounds are their footprints): a GeoTIFF store's ``meta/bounds``
(:attr:`rtscore.data.store.reader.TileMetadata.bounds`), or a data root's rasters (:func:`data_root_footprints`).

Distances are ground metres: the projected distance between two boxes times the CRS's ground scale
(:class:`rtscore.data.raster.ground.GroundScale`: its linear unit and, in Web Mercator (EPSG:3857), ``cos(latitude)``)
at the middle of the gap between the two boxes; other projected CRSs (UTM, polar stereographic, equal-area) count as
true to scale (UTM: within 0.1 %). Candidate pairs come from a shapely STRtree over the train footprints, never from
all pairs.

The rule (:func:`measure_blocking`, :func:`check_blocking`): a train tile and a val/test tile are too close when
their areas overlap, or when their ground distance is under ``buffer_m``. With ``buffer_m`` 0 touching tiles (two
adjacent regions on one grid: distance 0) pass and only overlapping ones (an intersection with an area) fail.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
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
# Two footprints overlap when their intersection is wider and taller than this (CRS units: 1 mm in a metric CRS):
# tiles of one grid whose shared edge differs in the last bits of a float do not overlap.
OVERLAP_TOLERANCE = 1e-3
MAX_LISTED = 20  # pairs kept in a report and named in an error
FOOTPRINT_CRS = "footprint CRS"  # the CRS, as errors name it


class BlockingError(SplitError):
    """A train tile overlaps, or lies within the buffer of, a val/test tile; or footprints cannot be compared.
    The message names both tiles, their splits and their ground distance."""


class TilePair(BaseModel):
    """A train tile and a tile of another split, and the ground between them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    train_tile: str = Field(..., description="The train tile.")
    split: str = Field(..., description="The other tile's split (val, test).")
    tile: str = Field(..., description="The other split's tile.")
    distance_m: float = Field(..., ge=0, description="Ground distance between their footprints (0: touching).")
    overlap: bool = Field(..., description="Their footprints overlap (an intersection with an area).")

    def describe(self) -> str:
        where = "overlaps" if self.overlap else f"is {self.distance_m:.1f} m (ground) from"
        return f"train tile {self.train_tile} {where} {self.split} tile {self.tile}"


class SplitDistance(BaseModel):
    """How close the train split comes to one other split."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    split: str = Field(..., description="The other split (val, test).")
    min_distance_m: float | None = Field(
        ..., description="Least ground distance between a train tile and one of its tiles (None: a split is empty)."
    )
    closest: TilePair | None = Field(..., description="The closest pair (an overlapping one first).")
    n_too_close: int = Field(..., ge=0, description="Pairs that overlap or lie within the buffer.")


class BlockingReport(BaseModel):
    """The spatial blocking by geometry of a set of splits: the train split's distance to each other split and the
    pairs too close (up to MAX_LISTED, closest first). ``measured`` False: there were no footprints to compare
    (``note`` says why), and the other fields are empty."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    measured: bool = Field(..., description="Footprints were compared.")
    note: str | None = Field(None, description="Why they were not (no footprints in the stores, ...).")
    crs: str | None = Field(None, description="The CRS of the footprints compared.")
    buffer_m: float = Field(
        0.0, ge=0, description="The ground distance a train tile must keep (splits.min_distance_m)."
    )
    distances: list[SplitDistance] = Field(default_factory=list, description="train <-> each other split.")
    too_close: list[TilePair] = Field(default_factory=list, description="Pairs too close, closest first (capped).")
    n_too_close: int = Field(0, ge=0, description="All pairs too close.")

    @classmethod
    def not_measured(cls, note: str, buffer_m: float = 0.0) -> BlockingReport:
        return cls(measured=False, note=note, buffer_m=buffer_m)

    def summary(self) -> str:
        """One line: ``train<->val 1234.5 m (train t1, val v7); train<->test overlap (train t3, test s2)``."""
        if not self.measured:
            return f"not measured: {self.note}"
        parts = []
        for d in self.distances:
            if d.closest is None:
                parts.append(f"train<->{d.split}: no tiles")
                continue
            c = d.closest
            dist = "overlap" if c.overlap else f"{d.min_distance_m:.1f} m"
            parts.append(f"train<->{d.split} {dist} (train {c.train_tile}, {d.split} {c.tile})")
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


def measure_blocking(footprints: Mapping[str, Mapping[str, Bounds]], crs: Any, buffer_m: float = 0.0) -> BlockingReport:
    """The train split's ground distance to each other split in ``footprints`` (split -> tile id -> bounds, all in
    ``crs``), its closest pair, and every pair that overlaps or lies under ``buffer_m`` ground metres apart.

    The closest pair of a split is the nearest in projected distance, measured in ground metres: in Web Mercator
    the scale changes by ~0.4 % over 10 km at 70° N, so only near-ties could be ordered otherwise on the ground.
    The pairs within the buffer are exact: every pair the buffer could reach is measured.

    Raises:
        BlockingError: a footprint that is not a box; a negative buffer.
        GroundSizeError: ``crs`` is not a projected CRS.
    """
    if not (buffer_m >= 0 and math.isfinite(buffer_m)):
        raise BlockingError(f"the blocking buffer must be a ground distance >= 0 m; got {buffer_m!r}")
    from shapely import STRtree, box

    ground = GroundScale.of(crs, FOOTPRINT_CRS)
    train_ids, train = _boxes(footprints.get(TRAIN, {}))
    others = {s: _boxes(f) for s, f in footprints.items() if s != TRAIN}
    tree = STRtree(box(train[:, 0], train[:, 1], train[:, 2], train[:, 3])) if len(train_ids) else None
    # Candidates within the buffer: a projected distance under buffer / (the least ground scale) covers them all.
    reach = buffer_m / _min_scale(ground, [train, *(a for _, a in others.values())])
    distances: list[SplitDistance] = []
    too_close: list[TilePair] = []
    for split, (ids, arr) in others.items():
        if tree is None or not ids:
            distances.append(SplitDistance(split=split, min_distance_m=None, closest=None, n_too_close=0))
            continue
        geoms = box(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3])

        def pair(j: int, i: int, split: str = split, ids: list[str] = ids, arr: np.ndarray = arr) -> TilePair:
            d, o = _pair(ground, as_bounds(train[i]), as_bounds(arr[j]))
            return TilePair(train_tile=train_ids[i], split=split, tile=ids[j], distance_m=d, overlap=o)

        nearest = tree.query_nearest(geoms, all_matches=True)  # every train tile tied at the least distance
        closest = min((pair(int(j), int(i)) for j, i in nearest.T), key=_closeness)
        if buffer_m > 0:
            found = tree.query(geoms, predicate="dwithin", distance=reach)
        else:
            found = tree.query(geoms, predicate="intersects")
        close = [p for j, i in found.T if (p := pair(int(j), int(i))).overlap or p.distance_m < buffer_m]
        distances.append(
            SplitDistance(split=split, min_distance_m=closest.distance_m, closest=closest, n_too_close=len(close))
        )
        too_close += close
    too_close.sort(key=_closeness)
    return BlockingReport(
        measured=True,
        crs=str(crs),
        buffer_m=float(buffer_m),
        distances=distances,
        too_close=too_close[:MAX_LISTED],
        n_too_close=len(too_close),
    )


def _closeness(p: TilePair) -> tuple[float, bool, str, str]:
    return p.distance_m, not p.overlap, p.train_tile, p.tile


def blocking_problem(report: BlockingReport) -> str | None:
    """The pairs too close as one message naming both tiles of each (up to 5) and what to do; None when none is."""
    if not report.n_too_close:
        return None
    shown = "; ".join(p.describe() for p in report.too_close[:5])
    more = f"; and {report.n_too_close - 5} more pair(s)" if report.n_too_close > 5 else ""
    rule = "overlap" if report.buffer_m == 0 else f"lie within {report.buffer_m:g} m of ground (splits.min_distance_m)"
    return (
        f"{report.n_too_close} pair(s) of a train tile and a val/test tile {rule}: {shown}{more}. Spatial blocking "
        "(guide §10.1) keeps the splits' ground apart: move the region(s) to one split, drop the tiles, or re-tile"
    )


def check_blocking(footprints: Mapping[str, Mapping[str, Bounds]], crs: Any, buffer_m: float = 0.0) -> BlockingReport:
    """:func:`measure_blocking`, raising when a train tile overlaps or lies within ``buffer_m`` of a val/test tile.

    Raises:
        BlockingError: naming both tiles of the closest pairs, their splits and their ground distance.
    """
    report = measure_blocking(footprints, crs, buffer_m)
    problem = blocking_problem(report)
    if problem is not None:
        raise BlockingError(problem)
    return report


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
