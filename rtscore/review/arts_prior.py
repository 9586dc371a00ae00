"""A contribution's relation to a prior ARTS file (``rts arts export --prior``, docs/arts.md): the prior features
each new feature overlaps (a shared area of at least :data:`MIN_OVERLAP_M2`, not only a touching border), for its
``UnknownRelationship``, and ``<output stem>_relationships.csv`` listing each pair with the areas, for a person to
sort into merged, split, new or stabilized."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rtscore.data.inventory.arts import ARTS_CRS, REQUIRED_FIELDS, equal_area_m2, reproject
from rtscore.data.inventory.check import ArtsFileError, file_crs, read_arts_file
from rtscore.review.manifest import ReviewError
from rtscore.storage import atomic_write_text

_log = logging.getLogger(__name__)

AREA_DECIMALS = 2  # ARTS's Area, and the relationships' areas: m² to the centimetre
MIN_OVERLAP_M2 = 0.01  # a shared area under this is a touching border (float noise of reprojected edges)
RELATIONSHIPS_SUFFIX = "_relationships.csv"
RELATIONSHIP_COLUMNS = (
    "new_uid",
    "object_id",
    "prior_uid",
    "overlap_m2",
    "new_area_m2",
    "prior_area_m2",
    "relationship",  # left empty: merged, split, new or stabilized, for a person to fill in
)


class ArtsExportError(ReviewError):
    """An ARTS export that cannot be made as asked; the message names the file, the object or scene, the field."""


@dataclass(frozen=True)
class NewFeature:
    """A feature of the contribution, as its relation to the prior file needs it: UID, object id, geometry
    (EPSG:3413) and equal-area m²."""

    uid: str
    object_id: int
    geom: Any
    area_m2: float


def read_prior(path: Path) -> tuple[list[str], list[Any]]:
    """(UIDs, geometries in EPSG:3413) of a prior ARTS file's features (those without a UID or a polygon are left
    out, counted in a warning; invalid polygons are made valid for the overlap).

    Raises:
        ArtsExportError: unreadable, or not an ARTS file (no UID or required fields, no CRS).
    """
    import shapely

    try:
        f = read_arts_file(path)
    except ArtsFileError as err:
        raise ArtsExportError(f"prior ARTS file: {err}") from None
    lacking = [n for n in ("UID", *REQUIRED_FIELDS) if n not in f.columns]
    if lacking:
        raise ArtsExportError(
            f"{path}: not an ARTS file (no {', '.join(lacking)} field); --prior takes ARTS's main file"
        )
    crs, _, _ = file_crs(f)
    if crs is None:
        raise ArtsExportError(f"{path}: declares no CRS (a shapefile needs its .prj); the overlaps cannot be placed")
    uids, geoms = [], []
    for r in f.rows:
        uid, g = r.values.get("UID"), r.geometry
        if (
            not isinstance(uid, str)
            or not uid.strip()
            or g is None
            or g.is_empty
            or g.geom_type not in ("Polygon", "MultiPolygon")
        ):
            continue
        g = reproject(g if g.is_valid else shapely.make_valid(g), crs, ARTS_CRS)
        uids.append(uid.strip())
        geoms.append(g)
    if len(uids) < len(f.rows):
        _log.warning(
            "%s: %d feature(s) without a UID or a polygon left out of the overlaps", path, len(f.rows) - len(uids)
        )
    return uids, geoms


def relate(
    features: Sequence[NewFeature], uids: Sequence[str], geoms: Sequence[Any]
) -> tuple[dict[str, str], list[tuple[Any, ...]]]:
    """Each new feature's overlaps with the prior file's features (``uids``, ``geoms`` in EPSG:3413): its
    UnknownRelationship (the prior UIDs, largest overlap first; by new UID, only those overlapping) and the rows of
    the relationships CSV."""
    import shapely

    tree = shapely.STRtree(geoms)
    relationships: dict[str, str] = {}
    rows: list[tuple[Any, ...]] = []
    for f in features:
        pairs = []
        for i in tree.query(f.geom, predicate="intersects").tolist():
            shared = equal_area_m2(shapely.intersection(f.geom, geoms[i]), ARTS_CRS)
            if shared >= MIN_OVERLAP_M2:
                pairs.append((shared, uids[i], i))
        pairs.sort(key=lambda p: (-p[0], p[1]))
        if pairs:
            relationships[f.uid] = ",".join(u for _, u, _ in pairs)
        for shared, uid, i in pairs:
            prior_area = equal_area_m2(geoms[i], ARTS_CRS)
            rows.append((f.uid, f.object_id, uid, _m2(shared), _m2(f.area_m2), _m2(prior_area), ""))
    return relationships, rows


def _m2(v: float) -> str:
    return f"{v:.{AREA_DECIMALS}f}"


def write_relationships(contribution: Path, rows: Iterable[tuple[Any, ...]]) -> Path:
    """``<contribution stem>_relationships.csv`` beside the contribution: one row per overlapping pair."""
    path = contribution.with_name(contribution.stem + RELATIONSHIPS_SUFFIX)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(RELATIONSHIP_COLUMNS)
    w.writerows(rows)
    atomic_write_text(path, buf.getvalue())
    return path
