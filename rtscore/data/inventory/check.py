"""The ARTS check: every rule of the ARTS format a file breaks, listed at once (docs/arts.md, "ARTS check").

:func:`read_arts_file` reads an ARTS file as it is (GeoJSON, or a shapefile or another OGR format with the full or
the 10-character names): each feature's values with their types as written, its geometry, the CRS the file declares.
:func:`check_arts` applies the rules to every feature and returns them all as :class:`ArtsProblem` s, so a person
fixes a file in one pass instead of one error per run:

- the nine required fields, ``UID`` and ``ContributionDate`` present and not missing (empty, null, NaN);
- ``CentroidLat`` / ``CentroidLon`` numbers within ±90 / ±180 and equal, within one unit of the 5th decimal, to the
  centroid ARTS computes from the geometry (:func:`~rtscore.data.inventory.arts.centroid_lat_lon`);
- ``BaseMapResolution`` (and ``Area`` when given) a positive number; ``RegionName``, ``CreatorLab`` and
  ``BaseMapSource`` text;
- ``BaseMapDate`` one ``YYYY-MM-DD`` date or two separated by a comma, the first not after the second;
  ``ContributionDate`` one date (zero-padded: ``2019-07-05``, never ``2019-7-5``);
- ``TrainClass`` one of Positive, Negative; ``LabelType`` one of Polygon, BoundingBox (exact spelling);
- ``UID`` a canonical UUID equal to the one recomputed from the feature's fields
  (:func:`~rtscore.data.inventory.arts.arts_uid`), and unique in the file;
- the relationship fields (``MergedRTS``, ``SplitRTS``, ``NewRTS``, ``StabilizedRTS``, ``UnknownRelationship``),
  when filled, comma-separated UIDs;
- the geometry a valid, non-empty Polygon or MultiPolygon; the file's CRS EPSG:3413 (a GeoJSON file without a
  ``crs`` member is taken as EPSG:3413, and the result says so).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from rtscore.config.base import StrictModel
from rtscore.data.inventory.arts import (
    ABBREVIATIONS,
    ARTS_CRS,
    LABEL_TYPES,
    RELATIONSHIP_FIELDS,
    REQUIRED_FIELDS,
    TRAIN_CLASSES,
    DateError,
    arts_columns,
    arts_uid,
    centroid_lat_lon,
    is_uid,
    parse_date,
    parse_date_range,
)
from rtscore.errors import PipelineError

GEOJSON_SUFFIXES = (".geojson", ".json")
MUST_HAVE = (*REQUIRED_FIELDS, "UID", "ContributionDate")  # every feature of an ARTS file carries these
CENTROID_TOLERANCE = 1e-5 + 1e-9  # one unit of the 5th decimal (and float noise)
FILE = "file"  # ArtsProblem.feature of a problem of the file as a whole


class ArtsFileError(PipelineError, ValueError):
    """A file that cannot be read as an ARTS file at all (unreadable, not JSON, not a FeatureCollection)."""


class ArtsProblem(StrictModel):
    """One rule of the ARTS format a feature (or the file) breaks."""

    feature: str = Field(..., description="'row <n>' (1-based, file order) with its UID when it has one; 'file'.")
    field: str = Field(..., description="The ARTS field (the file's abbreviation in parentheses), 'geometry', 'CRS'.")
    problem: str = Field(..., description="What is wrong, quoting the value.")
    expected: str = Field(..., description="What the format expects there.")

    def line(self) -> str:
        return f"{self.feature}: {self.field}: {self.problem}; expected {self.expected}"


class ArtsCheck(StrictModel):
    """What :func:`check_arts` found in one file."""

    path: str
    features: int = Field(..., ge=0)
    crs: str = Field(..., description="The CRS the geometry is in: declared, or assumed (see notes).")
    classes: dict[str, int] = Field(default_factory=dict, description="Features by valid TrainClass.")
    notes: list[str] = Field(default_factory=list, description="What was assumed (not problems).")
    problems: list[ArtsProblem] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        """One line: the file is valid (features, classes, CRS, notes), or how many problems where."""
        notes = f" ({'; '.join(self.notes)})" if self.notes else ""
        if self.ok:
            classes = ", ".join(f"{n} {c}" for c, n in self.classes.items())
            return f"{self.path}: a valid ARTS file: {self.features} features ({classes}), {self.crs}{notes}"
        rows = {p.feature for p in self.problems if p.feature != FILE}
        whole = sum(1 for p in self.problems if p.feature == FILE)
        of_file = f" and {whole} of the file as a whole" if whole else ""
        return (
            f"{self.path}: {len(self.problems)} problem(s): in {len(rows)} of {self.features} features{of_file}; "
            f"not a valid ARTS file{notes}"
        )


@dataclass(frozen=True, eq=False)
class ArtsRow:
    """One feature as written: its ARTS values by full name (None where the file has no value), its geometry."""

    row: int  # 1-based, in file order
    values: dict[str, Any]
    geometry: Any  # shapely, or None (no geometry, or geometry_error)
    geometry_error: str | None = None

    def label(self) -> str:
        uid = self.values.get("UID")
        return f"row {self.row} (UID {uid})" if isinstance(uid, str) and uid.strip() else f"row {self.row}"


@dataclass(frozen=True, eq=False)
class ArtsFile:
    """An ARTS file as read (:func:`read_arts_file`)."""

    path: Path
    columns: dict[str, str]  # full ARTS name -> the file's column (the name or its abbreviation)
    crs: str | None  # as declared; None: none declared
    geojson: bool
    rows: list[ArtsRow] = field(default_factory=list)

    def column(self, name: str) -> str:
        """``name`` as the messages name it: the abbreviation the file uses in parentheses."""
        col = self.columns.get(name, name)
        return name if col == name else f"{name} ({col})"


# ------------------------------------------------------------------------------------------------ reading
def read_arts_file(path: str | Path) -> ArtsFile:
    """The features of an ARTS file with their values as written (module docstring): GeoJSON (``.geojson``,
    ``.json``) read as JSON, so numbers and text keep their types and the ``crs`` member is seen; any other format
    through OGR (pyogrio; a shapefile's CRS from its .prj).

    Raises:
        ArtsFileError: not found, unreadable, not a GeoJSON FeatureCollection (naming the file).
    """
    p = Path(path)
    if not p.is_file():
        raise ArtsFileError(f"{p}: ARTS file not found")
    if p.suffix.lower() in GEOJSON_SUFFIXES:
        return _read_geojson(p)
    return _read_ogr(p)


def _read_geojson(p: Path) -> ArtsFile:
    import shapely.geometry

    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ArtsFileError(f"{p}: not readable as GeoJSON ({err})") from None
    if (
        not isinstance(data, dict)
        or data.get("type") != "FeatureCollection"
        or not isinstance(data.get("features"), list)
    ):
        raise ArtsFileError(f"{p}: not a GeoJSON FeatureCollection with a list of features")
    feats = [f if isinstance(f, dict) else {} for f in data["features"]]
    props: list[dict[str, Any]] = [_dict(f.get("properties")) for f in feats]
    columns = arts_columns(dict.fromkeys(k for pr in props for k in pr))
    rows = []
    for i, (f, pr) in enumerate(zip(feats, props, strict=True), start=1):
        geom, error = None, None
        if isinstance(f.get("geometry"), dict):
            try:
                geom = shapely.geometry.shape(f["geometry"])
            except Exception as err:  # shapely raises several types for malformed GeoJSON
                error = f"not a readable GeoJSON geometry ({err})"
        values = {name: _plain(pr.get(col)) for name, col in columns.items()}
        rows.append(ArtsRow(i, values, geom, error))
    return ArtsFile(p, columns, _geojson_crs(data.get("crs")), True, rows)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _geojson_crs(member: Any) -> str | None:
    """The CRS a GeoJSON ``crs`` member names (``{"type": "name", "properties": {"name": ...}}``); None: none."""
    if not isinstance(member, dict):
        return None
    name = (member.get("properties") or {}).get("name")
    return str(name) if name else None


def _read_ogr(p: Path) -> ArtsFile:
    import pyogrio
    import shapely

    try:
        meta, _, geoms, fields = pyogrio.raw.read(p)
    except Exception as err:  # pyogrio's DataSourceError/DataLayerError, GDAL's reasons inside
        raise ArtsFileError(f"{p}: not a readable vector file ({type(err).__name__}: {err})") from None
    names = [str(n) for n in meta["fields"]]
    columns = arts_columns(names)
    rows = []
    for i, wkb in enumerate(geoms):
        values = {name: _plain(fields[names.index(col)][i]) for name, col in columns.items()}
        rows.append(ArtsRow(i + 1, values, None if wkb is None else shapely.from_wkb(wkb)))
    return ArtsFile(p, columns, meta.get("crs"), False, rows)


def _plain(value: Any) -> Any:
    """A value as plain Python (a date field's value as ``YYYY-MM-DD`` text)."""
    if isinstance(value, np.datetime64):
        return None if np.isnat(value) else str(np.datetime_as_string(value, unit="D"))
    value = value.item() if isinstance(value, np.generic) else value
    return value.isoformat() if isinstance(value, dt.date) and not isinstance(value, dt.datetime) else value


# ------------------------------------------------------------------------------------------------ the rules
def check_arts(path: str | Path) -> ArtsCheck:
    """Every problem of the ARTS file at ``path`` (module docstring); an empty list: a valid ARTS file."""
    return check_file(read_arts_file(path))


def check_file(f: ArtsFile) -> ArtsCheck:
    """The rules applied to a file as read: the file's columns and CRS, each feature, then the UIDs across it."""
    problems: list[ArtsProblem] = []
    for name in MUST_HAVE:
        if name not in f.columns:
            abbr = ABBREVIATIONS[name]
            problems.append(ArtsProblem(feature=FILE, field=name, problem="no such column", expected=_also(abbr)))
    declared, notes, crs_problems = file_crs(f)
    crs = declared or ARTS_CRS  # unknown: the centroids checked as if in ARTS's CRS
    problems += crs_problems
    if not f.rows:
        problems.append(ArtsProblem(feature=FILE, field="features", problem="none", expected="at least one feature"))
    classes: Counter[str] = Counter()
    for r in f.rows:
        problems += _row_problems(f, r, crs)
        if r.values.get("TrainClass") in TRAIN_CLASSES:
            classes[r.values["TrainClass"]] += 1
    problems += _duplicate_uids(f)
    return ArtsCheck(
        path=str(f.path),
        features=len(f.rows),
        crs=crs,
        classes={c: classes[c] for c in TRAIN_CLASSES if classes[c]},
        notes=notes,
        problems=sorted(problems, key=_order(f)),
    )


def _also(abbr: str) -> str:
    return f"a column of that name (or {abbr!r} in a shapefile's abbreviated names)"


def _order(f: ArtsFile) -> Any:
    """Problems in file order: the file's own first, then by row; within a row as found."""
    rank = {r.label(): r.row for r in f.rows}
    return lambda p: rank.get(p.feature, 0)


def file_crs(f: ArtsFile) -> tuple[str | None, list[str], list[ArtsProblem]]:
    """(the CRS the file's geometry is in, notes, problems): EPSG:3413 declared; a GeoJSON file declaring none is
    taken as EPSG:3413 (noted); another CRS is a problem but its geometry is read in it; None: none declared by a
    format that must (a shapefile without .prj), or not a CRS (both problems)."""
    from rasterio.crs import CRS
    from rasterio.errors import CRSError

    if f.crs is None:
        if f.geojson:
            return ARTS_CRS, [f"no crs member: {ARTS_CRS} assumed, ARTS's CRS"], []
        return None, [], [_crs_problem("none declared (a shapefile needs its .prj)")]
    try:
        parsed = CRS.from_user_input(f.crs)
    except CRSError:
        return None, [], [_crs_problem(f"{f.crs!r} is not a CRS")]
    if parsed.to_epsg() == 3413:
        return ARTS_CRS, [], []
    return parsed.to_string(), [], [_crs_problem(f"the file declares {parsed.to_string()}")]


def _crs_problem(text: str) -> ArtsProblem:
    return ArtsProblem(feature=FILE, field="CRS", problem=text, expected=f"{ARTS_CRS} (ARTS keeps its geometry there)")


def _row_problems(f: ArtsFile, r: ArtsRow, crs: str) -> list[ArtsProblem]:
    """One feature's problems: each field's value, its UID against its fields, its geometry and centroid."""
    found: list[ArtsProblem] = []
    bad: set[str] = set()

    def add(name: str, problem: str, expected: str) -> None:
        bad.add(name)
        found.append(ArtsProblem(feature=r.label(), field=f.column(name), problem=problem, expected=expected))

    for name in f.columns:
        value = r.values.get(name)
        if _missing(value):
            if name in MUST_HAVE:
                add(name, "missing", f"a value in every feature ({_WHAT.get(name, 'see docs/arts.md')})")
            continue
        why = _value_problem(name, value)
        if why is not None:
            add(name, *why)
    uid = r.values.get("UID")
    if all(n in f.columns and n not in bad for n in REQUIRED_FIELDS) and is_uid(uid):
        want = arts_uid(r.values)
        if uid != want:
            add("UID", f"{uid} is not the UID of the feature's fields", f"{want} (uuid5 of the nine required fields)")
    for name, problem, expected in _geometry_problems(r, crs):
        add(name, problem, expected)
    return found


_WHAT: dict[str, str] = {
    "CentroidLat": "decimal degrees north, -90 to 90",
    "CentroidLon": "decimal degrees east, -180 to 180",
    "RegionName": "the region's name",
    "CreatorLab": "who digitised it",
    "BaseMapDate": "YYYY-MM-DD, or two such dates separated by a comma",
    "BaseMapSource": "the imagery's sensor, e.g. PlanetScope",
    "BaseMapResolution": "the imagery's pixel size in metres, a positive number",
    "TrainClass": " or ".join(TRAIN_CLASSES),
    "LabelType": " or ".join(LABEL_TYPES),
    "UID": "a UUID: 8-4-4-4-12 lower-case hex digits",
    "ContributionDate": "YYYY-MM-DD",
    "Area": "m², a positive number",
}


def _missing(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, float) and math.isnan(value))
        or (isinstance(value, str) and not value.strip())
    )


def _value_problem(name: str, value: Any) -> tuple[str, str] | None:
    """(problem, expected) of one present value, None when it is right."""
    match name:
        case "CentroidLat" | "CentroidLon":
            bound = 90 if name == "CentroidLat" else 180
            return _number(value, -bound, bound, _WHAT[name])
        case "BaseMapResolution" | "Area":
            return _number(value, 0.0, math.inf, _WHAT[name], positive=True)
        case "RegionName" | "CreatorLab" | "BaseMapSource":
            return None if isinstance(value, str) else (f"{value!r} is not text", f"text: {_WHAT[name]}")
        case "BaseMapDate" | "ContributionDate":
            return _date(name, value)
        case "TrainClass" | "LabelType":
            allowed = TRAIN_CLASSES if name == "TrainClass" else LABEL_TYPES
            return None if value in allowed else (f"{value!r} is not an allowed value", f"one of {', '.join(allowed)}")
        case "UID":
            return None if is_uid(value) else (f"{value!r} is not a UID", _WHAT["UID"])
        case _ if name in RELATIONSHIP_FIELDS:
            return _uid_list(value)
        case _:
            return None  # BaseMapID, Notes: free text


def _number(value: Any, lo: float, hi: float, what: str, *, positive: bool = False) -> tuple[str, str] | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{value!r} is {type(value).__name__}, not a number", f"a number: {what}"
    if not math.isfinite(value) or value < lo or value > hi or (positive and value <= 0):
        return f"{value!r} is out of range", what
    return None


def _date(name: str, value: Any) -> tuple[str, str] | None:
    if not isinstance(value, str):
        return f"{value!r} is not text", _WHAT[name]
    try:
        if name == "BaseMapDate":
            parse_date_range(value, strict=True)
        else:
            parse_date(value, strict=True)
    except DateError as err:
        return str(err), _WHAT[name] + (" (the first not after the second)" if name == "BaseMapDate" else "")
    return None


def _uid_list(value: Any) -> tuple[str, str] | None:
    expected = "UIDs separated by commas (8-4-4-4-12 lower-case hex digits each)"
    if not isinstance(value, str):
        return f"{value!r} is not text", expected
    bad = [part for part in value.split(",") if not is_uid(part.strip())]
    return (f"{', '.join(repr(b) for b in bad)} not a UID", expected) if bad else None


def _geometry_problems(r: ArtsRow, crs: str) -> list[tuple[str, str, str]]:
    """(field, problem, expected) of a feature's geometry and of its centroid fields against it."""
    import shapely

    polygon = "a Polygon or MultiPolygon"
    g = r.geometry
    if r.geometry_error is not None:
        return [("geometry", r.geometry_error, polygon)]
    if g is None:
        return [("geometry", "none", polygon)]
    if g.geom_type not in ("Polygon", "MultiPolygon"):
        return [("geometry", f"a {g.geom_type}", polygon)]
    if g.is_empty:
        return [("geometry", "empty", f"{polygon} with an area")]
    found = []
    if not g.is_valid:
        found.append(("geometry", f"invalid: {shapely.is_valid_reason(g)}", f"a valid {polygon[2:]} (make_valid)"))
    found += _centroid_problems(r.values, g, crs)
    return found


def _centroid_problems(values: Mapping[str, Any], g: Any, crs: str) -> list[tuple[str, str, str]]:
    """The centroid fields against the geometry's centroid. An invalid ring's centroid (what ARTS's own script
    computes for it) can lie anywhere, even off the globe, so for one either its centroid or the repaired
    geometry's (make_valid) passes, and the repaired one's is the centroid asked for."""
    import shapely

    candidates = [g] if g.is_valid else [shapely.make_valid(g), g]
    centroids = [centroid_lat_lon(c, crs) for c in candidates if c.area > 0]
    found = []
    for k, name in enumerate(("CentroidLat", "CentroidLon")):
        got: Any = values.get(name)
        if not centroids or _number(got, -math.inf, math.inf, "") is not None:
            continue  # no area to take a centroid of, or not a number (reported as such)
        if all(abs(got - c[k]) > CENTROID_TOLERANCE for c in centroids):
            expected = f"{centroids[0][k]!r} (the centroid of the geometry in EPSG:4326, 5 decimals)"
            found.append((name, f"{got!r} is not the geometry's centroid", expected))
    return found


def _duplicate_uids(f: ArtsFile) -> list[ArtsProblem]:
    rows: dict[str, list[int]] = {}
    for r in f.rows:
        uid = r.values.get("UID")
        if isinstance(uid, str) and uid.strip():
            rows.setdefault(uid, []).append(r.row)
    out = []
    for r in f.rows:
        others = [n for n in rows.get(r.values.get("UID") or "", []) if n != r.row]
        if others:
            out.append(
                ArtsProblem(
                    feature=r.label(),
                    field=f.column("UID"),
                    problem=f"also the UID of row(s) {', '.join(map(str, others))}",
                    expected="a UID unique in the file",
                )
            )
    return out
