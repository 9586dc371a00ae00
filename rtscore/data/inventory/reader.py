"""The one reader of RTS inventories (docs/inventories.md, "Reading an inventory"): ARTS files (full or abbreviated
field names), inventories whose class, label-type and date columns a tiling config maps, and plain polygon files,
each feature typed (:class:`InventoryFeature`) on the grid CRS; every bad value of a file refused in one error.

Schema (config ``polygons.schema``, default auto): ``columns`` given -> mapped; else a file carrying every required
ARTS field -> ARTS; else a file with ARTS's TrainClass (but not every required field) is refused, naming the fields
it lacks; else plain (every polygon an RTS outline, no date). A file with every required ARTS field is in its
declared CRS, EPSG:3413 when it declares none (a GeoJSON without a ``crs`` member too), whatever the schema; an ARTS
feature's id is its UID.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rtscore.config.tiling import PolygonsConfig
from rtscore.data.inventory.arts import (
    ABBREVIATIONS,
    ARTS_CRS,
    BOUNDING_BOX,
    FULL_NAMES,
    NEGATIVE,
    POLYGON,
    POSITIVE,
    REQUIRED_FIELDS,
    DateError,
    DateRange,
    arts_columns,
    missing_required,
    parse_date_range,
)
from rtscore.data.inventory.object_pixels import SEPARATOR
from rtscore.data.raster.vector_labels import read_polygons
from rtscore.errors import PipelineError

log = logging.getLogger(__name__)

TrainClass = Literal["positive", "negative"]
LabelType = Literal["polygon", "bbox"]
SchemaKind = Literal["arts", "mapped", "plain"]
MOST_NAMED = 20  # features named in one error or warning line; the rest counted

# ARTS's words for the typed values (log lines, errors, and the columns a review round writes)
CLASS_WORDS: dict[TrainClass, str] = {"positive": POSITIVE, "negative": NEGATIVE}
TYPE_WORDS: dict[LabelType, str] = {"polygon": POLYGON, "bbox": BOUNDING_BOX}
# The columns of a review round's inventory.gpkg, read back with schema mapped (:func:`canonical_mapping`)
CLASS_COLUMN, LABEL_TYPE_COLUMN, DATE_COLUMN = "train_class", "label_type", "label_date"


class InventoryError(PipelineError, ValueError):
    """An inventory that cannot be read as labels; the message names the file, the features and the field."""


@dataclass(frozen=True)
class InventoryFeature:
    """One label of an inventory: its id, its feature index in the file, class, label type, date (range), region
    (the region column's value) and geometry on the grid CRS (a valid shapely (Multi)Polygon), and the file's
    attributes as read."""

    uid: str
    row: int
    train_class: TrainClass
    label_type: LabelType
    dates: DateRange | None
    region: str | None
    geometry: Any
    properties: dict[str, Any] = field(default_factory=dict)
    repaired: bool = False  # invalid in the file, repaired with make_valid

    @property
    def ignore(self) -> bool:
        """The polygon's own ``ignore`` flag (an attribute of the file): its pixels are 255 in every tile."""
        return bool(self.properties.get("ignore", False))


@dataclass(frozen=True)
class Schema:
    """How a file's columns give each feature's id, class, label type, date and region (None: not given)."""

    kind: SchemaKind
    abbreviated: bool = False  # ARTS with the shapefile's 10-character names
    id_column: str | None = None
    region_column: str | None = None
    class_column: str | None = None
    classes: dict[str, TrainClass] = field(default_factory=dict)  # a value of class_column -> its class
    type_column: str | None = None
    types: dict[str, LabelType] = field(default_factory=dict)
    date_column: str | None = None
    date_required: bool = False  # ARTS: BaseMapDate is a required field

    def describe(self) -> str:
        match self.kind:
            case "arts":
                return "ARTS (abbreviated names)" if self.abbreviated else "ARTS"
            case "mapped":
                return "mapped columns" + ("" if self.class_column else " (no class column: every polygon is an RTS)")
            case "plain":
                return "no class column: every polygon is an RTS"
            case _:
                raise AssertionError(self.kind)


@dataclass(frozen=True)
class InventoryRead:
    """An inventory file read: how (its schema) and its features in file order."""

    path: Path
    schema: Schema
    features: list[InventoryFeature]

    @property
    def repaired(self) -> list[InventoryFeature]:
        return [f for f in self.features if f.repaired]

    def counts(self) -> str:
        """Features by class and label type, in ARTS's words: ``Positive 10 (Polygon 9, BoundingBox 1), ...``."""
        by = Counter((f.train_class, f.label_type) for f in self.features)
        parts = []
        for c in CLASS_WORDS:
            n = sum(v for (k, _), v in by.items() if k == c)
            if n:
                types = ", ".join(f"{TYPE_WORDS[t]} {by[(c, t)]}" for t in TYPE_WORDS if by[(c, t)])
                parts.append(f"{CLASS_WORDS[c]} {n} ({types})")
        return ", ".join(parts)


def read_inventory_file(
    path: str | Path, crs: str, polygons: PolygonsConfig, region_column: str | None = None
) -> InventoryRead:
    """The features of the inventory ``path`` on ``crs`` (the grid CRS), read by its schema (module docstring).
    One INFO line says how it was read; one WARNING line names the polygons repaired.

    Raises:
        InventoryError: the file missing, unreadable or without polygons; a configured column it lacks; some but
            not all required ARTS fields with TrainClass; and, all in one error, every bad value: a class or label
            type outside the allowed values, a date that is not one, an empty geometry, a blank or repeated id, a
            blank region.
        LabelPolygonError: no CRS (and not ARTS), a geometry that is not a polygon, coordinates beyond lon/lat.
    """
    p = Path(path)
    fields = vector_columns(p, "polygons.path")
    schema = schema_of(p, fields, polygons, region_column)
    arts_file = not missing_required(fields)  # an ARTS file, whatever the schema reads of it: EPSG:3413 by default
    raw = read_polygons(p, crs, default_crs=ARTS_CRS if arts_file else None, keep_empty=True)
    read = InventoryRead(p, schema, _typed(p, schema, raw))
    log.info("%s: %s: %d features: %s", p, schema.describe(), len(read.features), read.counts())
    if read.repaired:
        names = listed([f.uid for f in read.repaired])
        log.warning("%s: %d invalid polygon(s) repaired with make_valid: %s", p, len(read.repaired), names)
    return read


def vector_columns(path: Path, key: str) -> list[str]:
    """The attribute columns of a vector file's first layer (``key``: the config key naming it, for errors).

    Raises:
        InventoryError: the file missing, unreadable or holding no feature.
    """
    import pyogrio

    if not path.is_file():
        raise InventoryError(f"{path}: polygon file not found")
    try:
        info = pyogrio.read_info(path, force_feature_count=True)
    except Exception as err:  # pyogrio's DataSourceError/DataLayerError, GDAL's reasons inside
        raise InventoryError(f"{path}: not a readable vector file ({type(err).__name__}: {err})") from None
    if int(info["features"]) == 0:
        raise InventoryError(f"{path}: holds no polygons ({key} must name a file with at least one polygon)")
    return [str(f) for f in info["fields"]]


def resolve_column(name: str, fields: list[str]) -> str | None:
    """The column of ``fields`` holding ``name``: itself, or its ARTS abbreviation or full name (a config naming
    RegionName reads a shapefile's ReginNm); None: neither."""
    for candidate in (name, ABBREVIATIONS.get(name), FULL_NAMES.get(name)):
        if candidate is not None and candidate in fields:
            return candidate
    return None


def _column(path: Path, key: str, name: str | None, fields: list[str]) -> str | None:
    if name is None:
        return None
    found = resolve_column(name, fields)
    if found is None:
        raise InventoryError(f"{key}: column {name!r} is not in {path}; its columns are {fields}")
    return found


def schema_of(path: Path, fields: list[str], polygons: PolygonsConfig, region_column: str | None) -> Schema:
    """How ``path`` (with columns ``fields``) is read (module docstring).

    Raises:
        InventoryError: a configured column the file lacks; schema arts, or auto with TrainClass, on a file without
            every required ARTS field (naming those it lacks).
    """
    found = arts_columns(fields)
    missing = missing_required(fields)
    kind = polygons.schema_
    if kind == "auto":
        if polygons.columns is not None:
            kind = "mapped"
        elif not missing:
            kind = "arts"
        elif "TrainClass" in found:
            raise InventoryError(
                f"{path}: has ARTS's class field {found['TrainClass']!r} but not every required ARTS field: it lacks "
                f"{missing} (full names or the shapefile abbreviations, docs/inventories.md); add them, or set "
                "polygons.schema mapped (polygons.columns) or plain (every polygon an RTS)"
            )
        else:
            kind = "plain"
    elif kind == "arts" and missing:
        raise InventoryError(
            f"{path}: polygons.schema is arts, but the file lacks the required ARTS field(s) {missing} (full names "
            f"or the shapefile abbreviations, docs/inventories.md); its columns are {fields}"
        )
    id_column = _column(path, "polygons.id_column", polygons.id_column, fields)
    region = _column(path, "regions.column", region_column, fields)
    match kind:
        case "arts":
            return Schema(
                "arts",
                abbreviated=any(found[f] != f for f in REQUIRED_FIELDS),
                id_column=id_column or found.get("UID"),
                region_column=region,
                class_column=found["TrainClass"],
                classes={POSITIVE: "positive", NEGATIVE: "negative"},
                type_column=found["LabelType"],
                types={POLYGON: "polygon", BOUNDING_BOX: "bbox"},
                date_column=found["BaseMapDate"],
                date_required=True,
            )
        case "mapped":
            return _mapped(path, fields, polygons, id_column, region)
        case "plain":
            return Schema("plain", id_column=id_column, region_column=region)
        case _:
            raise AssertionError(kind)


def _mapped(
    path: Path, fields: list[str], polygons: PolygonsConfig, id_column: str | None, region: str | None
) -> Schema:
    cols = polygons.columns
    assert cols is not None  # PolygonsConfig: schema mapped needs columns
    key = "polygons.columns"
    classes: dict[str, TrainClass] = {v: "positive" for v in cols.positive_values}
    classes.update({v: "negative" for v in cols.negative_values})
    types: dict[str, LabelType] = {v: "polygon" for v in cols.polygon_values}
    types.update({v: "bbox" for v in cols.bbox_values})
    return Schema(
        "mapped",
        id_column=id_column,
        region_column=region,
        class_column=_column(path, f"{key}.class_column", cols.class_column, fields),
        classes=classes,
        type_column=_column(path, f"{key}.label_type_column", cols.label_type_column, fields),
        types=types,
        date_column=_column(path, f"{key}.date_column", cols.date_column, fields),
    )


# --------------------------------------------------------------------------------------------- features


class _Problems:
    """Bad values of a file, gathered to be refused in one error: (field, what) -> the features (names)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.found: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.hints: dict[tuple[str, str], str] = {}

    def add(self, field_name: str, what: str, feature: str, hint: str = "") -> None:
        self.found[(field_name, what)].append(feature)
        if hint:
            self.hints[(field_name, what)] = hint

    def raise_any(self) -> None:
        if not self.found:
            return
        lines = [
            f"{name} {what}: {listed(features)}"
            + (f"; {self.hints[(name, what)]}" if (name, what) in self.hints else "")
            for (name, what), features in self.found.items()
        ]
        if len(lines) == 1:
            raise InventoryError(f"{self.path}: {lines[0]}")
        raise InventoryError(f"{self.path}: {len(lines)} problems:\n  " + "\n  ".join(lines))


def listed(items: list[str], most: int = MOST_NAMED) -> str:
    """``items`` joined, the first ``most`` of them and how many more."""
    more = f" and {len(items) - most} more" if len(items) > most else ""
    return ", ".join(items[:most]) + more


def _text(value: Any) -> str:
    return "" if value is None else str(value).strip()


def _typed(path: Path, schema: Schema, raw: list[dict[str, Any]]) -> list[InventoryFeature]:
    """The features of ``raw`` (read_polygons' dicts) typed by ``schema``; every bad value refused at once."""
    problems = _Problems(path)
    uids = _ids(path, schema, raw, problems)
    out = []
    for row, (f, uid) in enumerate(zip(raw, uids, strict=True)):
        name = uid if schema.id_column else f"row {row}"
        props = dict(f.get("properties") or {})
        train_class = _choice(schema.class_column, schema.classes, props, "positive", name, problems)
        label_type = _choice(schema.type_column, schema.types, props, "polygon", name, problems)
        dates = _dates(schema, props, name, problems)
        region = None
        if schema.region_column is not None:
            region = _text(props.get(schema.region_column))
            if not region:
                problems.add(f"regions.column {schema.region_column!r}", "is blank", name)
        geometry, repaired = _geometry(f.get("geometry"), name, problems)
        if train_class is None or label_type is None or geometry is None:
            continue
        out.append(InventoryFeature(uid, row, train_class, label_type, dates, region, geometry, props, repaired))
    problems.raise_any()
    return out


def _ids(path: Path, schema: Schema, raw: list[dict[str, Any]], problems: _Problems) -> list[str]:
    """Each feature's id: the id column's value, else ``<file stem>-<feature index>``; blank, repeated or
    ';'-holding ids (metadata.csv lists ids ';'-joined) are problems."""
    if schema.id_column is None:
        return [f"{path.stem}-{i}" for i in range(len(raw))]
    key = f"id column {schema.id_column!r}"
    uids = [_text((f.get("properties") or {}).get(schema.id_column)) for f in raw]
    seen = Counter(uids)
    for row, uid in enumerate(uids):
        if not uid:
            problems.add(key, "is blank", f"row {row}")
        elif seen[uid] > 1:
            problems.add(key, f"repeats {uid!r}", f"row {row}", "ids must be unique")
        elif SEPARATOR in uid or "@" in uid:
            problems.add(key, "holds ';' or '@'", uid, "metadata.csv separates ids with ';' and ObjectPixels with '@'")
    return uids


def _choice(
    column: str | None,
    values: dict[str, Any],
    props: dict[str, Any],
    default: Any,
    name: str,
    problems: _Problems,
) -> Any:
    """The typed value of ``column`` (``values``: its allowed values), ``default`` without a column; None (and a
    problem) for a value outside them."""
    if column is None:
        return default
    value = _text(props.get(column))
    if value in values:
        return values[value]
    allowed = ", ".join(repr(v) for v in values)
    problems.add(f"{column!r}", f"value {value!r}", name, f"allowed values: {allowed} (case-sensitive)")
    return None


def _dates(schema: Schema, props: dict[str, Any], name: str, problems: _Problems) -> DateRange | None:
    if schema.date_column is None:
        return None
    value = props.get(schema.date_column)
    try:
        dates = date_range(value)
    except DateError:
        problems.add(
            f"{schema.date_column!r}",
            f"value {_text(value)!r}",
            name,
            "a date is YYYY-MM-DD, a range two of them separated by a comma",
        )
        return None
    if dates is None and schema.date_required:
        problems.add(f"{schema.date_column!r}", "is blank", name, "ARTS requires each label's base-map date")
    return dates


def date_range(value: Any) -> DateRange | None:
    """A label's date (range) from a date column's value: ``YYYY-MM-DD`` (unpadded too), two of them separated by a
    comma, an ISO date-time, or a date field; None when blank.

    Raises:
        DateError: a value that is none of these.
    """
    if isinstance(value, dt.datetime):
        return DateRange(value.date(), value.date())
    if isinstance(value, dt.date):
        return DateRange(value, value)
    text = _text(value)
    if not text:
        return None
    try:
        return parse_date_range(text)
    except DateError:
        if "," in text:
            raise
        try:
            day = dt.datetime.fromisoformat(text).date()  # an ISO date-time: "2019-07-15T10:42:00Z"
        except ValueError:
            raise DateError(f"{text!r} is not a date YYYY-MM-DD") from None
        return DateRange(day, day)


def _geometry(geom: dict[str, Any] | None, name: str, problems: _Problems) -> tuple[Any, bool]:
    """(a valid (Multi)Polygon, whether it was repaired); (None, False) and a problem for an empty one."""
    import shapely

    if geom is None:
        problems.add("geometry", "is empty", name, "delete the feature or draw it")
        return None, False
    shape = shapely.geometry.shape(geom)
    if shape.is_valid:
        return shape, False
    fixed = polygonal(shapely.make_valid(shape))
    if fixed.is_empty:
        problems.add("geometry", "has no area once made valid", name, "delete the feature or draw it again")
        return None, False
    return fixed, True


def polygonal(geom: Any) -> Any:
    """The polygons of a geometry (make_valid can leave a collection with lines and points), as one geometry."""
    import shapely

    if geom.geom_type in ("Polygon", "MultiPolygon"):
        return geom
    parts = [g for g in getattr(geom, "geoms", []) if g.geom_type in ("Polygon", "MultiPolygon")]
    return shapely.union_all(parts) if parts else shapely.Polygon()


def canonical_mapping() -> dict[str, Any]:
    """``polygons.columns`` reading the canonical columns a review round writes (:data:`CLASS_COLUMN`, ...)."""
    return {
        "class_column": CLASS_COLUMN,
        "positive_values": [POSITIVE],
        "negative_values": [NEGATIVE],
        "label_type_column": LABEL_TYPE_COLUMN,
        "polygon_values": [POLYGON],
        "bbox_values": [BOUNDING_BOX],
        "date_column": DATE_COLUMN,
    }


def canonical_values(features: list[InventoryFeature]) -> dict[str, list[str]]:
    """The canonical columns' values of ``features`` (class, label type, date range as ARTS writes it)."""
    return {
        CLASS_COLUMN: [CLASS_WORDS[f.train_class] for f in features],
        LABEL_TYPE_COLUMN: [TYPE_WORDS[f.label_type] for f in features],
        DATE_COLUMN: [f.dates.text() if f.dates is not None else "" for f in features],
    }
