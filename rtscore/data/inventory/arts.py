"""The ARTS metadata format (docs/inventories.md, "ARTS"): its field names (full and the shapefile's 10-character
abbreviations), its class and label-type values, its base-map dates, and its feature identity (UID).

ARTS keeps geometry in EPSG:3413 (NSIDC polar stereographic north). A feature's UID is
``uuid5(NAMESPACE_DNS, s)``, ``s`` the nine required fields written as text and joined with nothing between them, in
:data:`REQUIRED_FIELDS` order: the centroid rounded to 5 decimals (written as Python writes a float: ``71.5``, not
``71.50000``), the base-map resolution as an integer when it is whole (``3``, not ``3.0``), the other fields as they
are. :func:`arts_uid` computes it; the exporter and the check both use it, so a UID written here is the one ARTS
computes for the same fields.
"""

from __future__ import annotations

import datetime as dt
import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rtscore.errors import PipelineError

ARTS_CRS = "EPSG:3413"  # ARTS geometry: NSIDC Sea Ice Polar Stereographic North
ARTS_CRS_URN = "urn:ogc:def:crs:EPSG::3413"  # the GeoJSON crs member ARTS's files carry
CENTROID_CRS = "EPSG:4326"  # CentroidLat / CentroidLon
CENTROID_DECIMALS = 5
EQUAL_AREA_CRS = "EPSG:6931"  # WGS 84 / NSIDC EASE-Grid 2.0 North (Lambert azimuthal equal-area): Area in m²

REQUIRED_FIELDS = (
    "CentroidLat",
    "CentroidLon",
    "RegionName",
    "CreatorLab",
    "BaseMapDate",
    "BaseMapSource",
    "BaseMapResolution",
    "TrainClass",
    "LabelType",
)
GENERATED_FIELDS = (
    "MergedRTS",
    "SplitRTS",
    "NewRTS",
    "StabilizedRTS",
    "UnknownRelationship",
    "ContributionDate",
    "UID",
)
RELATIONSHIP_FIELDS = GENERATED_FIELDS[:5]  # comma-separated UIDs of intersecting features, sorted by a person
OPTIONAL_FIELDS = ("BaseMapID", "Area", "Notes")
ALL_FIELDS = REQUIRED_FIELDS + GENERATED_FIELDS + OPTIONAL_FIELDS

# The shapefile copies' 10-character names, field by field in ALL_FIELDS order.
ABBREVIATIONS: dict[str, str] = dict(
    zip(
        ALL_FIELDS,
        (
            "CntrdLt",
            "CntrdLn",
            "ReginNm",
            "CretrLb",
            "BasMpDt",
            "BsMpSrc",
            "BsMpRsl",
            "TrnClss",
            "LablTyp",
            "MrgdRTS",
            "SpltRTS",
            "NewRTS",
            "StblRTS",
            "UnknwnR",
            "CntrbtD",
            "UID",
            "BasMpID",
            "Area",
            "Notes",
        ),
        strict=True,
    )
)
FULL_NAMES: dict[str, str] = {abbr: full for full, abbr in ABBREVIATIONS.items()}

POSITIVE, NEGATIVE = "Positive", "Negative"
TRAIN_CLASSES = (POSITIVE, NEGATIVE)  # Positive: a genuine RTS; Negative: mapped background (a hard negative)
POLYGON, BOUNDING_BOX = "Polygon", "BoundingBox"
LABEL_TYPES = (POLYGON, BOUNDING_BOX)
DATE_FORMAT = "%Y-%m-%d"
_DATE_RE = re.compile(r"^\s*(\d{4})-(\d{1,2})-(\d{1,2})\s*$")


def arts_columns(columns: Iterable[str]) -> dict[str, str]:
    """The ARTS fields among a file's ``columns``: full name -> the column holding it (the full name or its
    abbreviation; a full name wins when a file has both)."""
    cols = list(columns)
    found: dict[str, str] = {}
    for full in ALL_FIELDS:
        if full in cols:
            found[full] = full
        elif ABBREVIATIONS[full] in cols:
            found[full] = ABBREVIATIONS[full]
    return found


def missing_required(columns: Iterable[str]) -> list[str]:
    """The required ARTS fields a file lacks (by full name), in :data:`REQUIRED_FIELDS` order."""
    found = arts_columns(columns)
    return [f for f in REQUIRED_FIELDS if f not in found]


def round_centroid(value: float) -> float:
    """A centroid coordinate as ARTS stores it: rounded to :data:`CENTROID_DECIMALS` decimals."""
    return round(float(value), CENTROID_DECIMALS)


def reproject(geom: Any, src: Any, dst: Any) -> Any:
    """A shapely geometry's vertices moved from CRS ``src`` to ``dst`` (anything rasterio's ``CRS.from_user_input``
    takes; EPSG:4326 as lon, lat), edges not densified: ARTS's own tools move vertices the same way, and over the
    few metres between a slump outline's vertices the two projections' straight lines differ by far less than a
    millimetre."""
    import numpy as np
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform

    s, d = CRS.from_user_input(src), CRS.from_user_input(dst)
    if s == d:
        return geom

    def move(xy: np.ndarray) -> np.ndarray:
        xs, ys = transform(s, d, xy[:, 0], xy[:, 1])
        return np.column_stack([xs, ys])

    return shapely.transform(geom, move)


def centroid_lat_lon(geom: Any, crs: Any) -> tuple[float, float]:
    """(CentroidLat, CentroidLon) of a geometry in ``crs`` as ARTS computes them: the geometry moved to EPSG:4326,
    the centroid of that lon/lat geometry, each coordinate rounded to :data:`CENTROID_DECIMALS` decimals."""
    c = reproject(geom, crs, CENTROID_CRS).centroid
    return round_centroid(c.y), round_centroid(c.x)


def equal_area_m2(geom: Any, crs: Any) -> float:
    """A geometry's area in m² on the ground: measured in :data:`EQUAL_AREA_CRS`, which keeps areas over the whole
    northern hemisphere (ARTS's ``Area``)."""
    return float(reproject(geom, crs, EQUAL_AREA_CRS).area)


def resolution_text(value: Any) -> str:
    """BaseMapResolution as it enters the UID: ``3`` for 3 or 3.0, ``0.5`` for 0.5."""
    x = float(value)
    return str(int(x)) if x.is_integer() else str(x)


def uid_seed(fields: Mapping[str, Any]) -> str:
    """The text ARTS hashes into a UID: the required fields as text, in order, joined with nothing between them."""
    parts = []
    for name in REQUIRED_FIELDS:
        value = fields[name]
        if name in ("CentroidLat", "CentroidLon"):
            parts.append(str(round_centroid(value)))
        elif name == "BaseMapResolution":
            parts.append(resolution_text(value))
        else:
            parts.append(str(value))
    return "".join(parts)


def arts_uid(fields: Mapping[str, Any]) -> str:
    """A feature's ARTS UID: ``uuid5(NAMESPACE_DNS, uid_seed(fields))`` (module docstring)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, uid_seed(fields)))


def is_uid(text: Any) -> bool:
    """Whether ``text`` is a UID as ARTS writes one: a UUID in its canonical lower-case 8-4-4-4-12 form."""
    try:
        return isinstance(text, str) and str(uuid.UUID(text)) == text
    except ValueError:
        return False


@dataclass(frozen=True)
class DateRange:
    """A label's base-map date: one day (start == end) or a range of acquisitions (``2019-07-01,2019-08-15``)."""

    start: dt.date
    end: dt.date

    def age_days(self, scene: dt.date) -> int:
        """Days between a scene's acquisition and this range (0 inside it)."""
        if scene < self.start:
            return (self.start - scene).days
        if scene > self.end:
            return (scene - self.end).days
        return 0

    def text(self) -> str:
        """The ARTS form: ``YYYY-MM-DD``, or two such dates separated by a comma."""
        a, b = self.start.strftime(DATE_FORMAT), self.end.strftime(DATE_FORMAT)
        return a if a == b else f"{a},{b}"


class DateError(PipelineError, ValueError):
    """A base-map or contribution date that is not ``YYYY-MM-DD`` (or two of them separated by a comma)."""


def parse_date(text: str, *, strict: bool = False) -> dt.date:
    """One ``YYYY-MM-DD`` date. Not strict: unpadded months and days (``2019-7-5``, as real files have) are read;
    strict (the ARTS check): only the padded form."""
    m = _DATE_RE.match(str(text))
    if m is None or (strict and str(text).strip() != f"{m[1]}-{int(m[2]):02d}-{int(m[3]):02d}"):
        raise DateError(f"{text!r} is not a date YYYY-MM-DD")
    try:
        return dt.date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError as err:
        raise DateError(f"{text!r} is not a calendar date ({err})") from None


def parse_date_range(text: Any, *, strict: bool = False) -> DateRange:
    """A BaseMapDate: one date, or two separated by a comma (start, end; the start not after the end)."""
    if text is None or not str(text).strip():
        raise DateError("no date")
    parts = [p for p in str(text).split(",")]
    if len(parts) > 2:
        raise DateError(f"{text!r} has {len(parts)} dates; a range is two dates separated by a comma")
    dates = [parse_date(p, strict=strict) for p in parts]
    start, end = dates[0], dates[-1]
    if end < start:
        raise DateError(f"{text!r}: the range ends before it starts")
    return DateRange(start, end)
