"""``rts arts export``: a campaign's objects, judged by a review when verdicts are given, as an ARTS contribution
(docs/arts.md, "ARTS export").

:func:`export_arts` reads the campaign's ``objects.gpkg`` (its columns, then the objects exported only:
rtscore.review.objects_columns) and writes one GeoJSON FeatureCollection in EPSG:3413 (with a ``crs`` member, as
ARTS's own files carry), one feature per object exported, every required ARTS field filled:

- which objects, and ``TrainClass``: with verdicts, ``rts`` -> Positive, ``not_rts`` -> Negative (a mapped false
  positive: background), ``unsure`` left out; objects nobody judged only with ``include_unreviewed``, as Positive,
  ``Notes`` saying they are unreviewed model detections;
- ``BaseMapDate`` from the object's scenes (its ``scene_ids``, found in the campaign's ``index.geojson``): the
  ``date`` column of the scene list CSV given, else the GeoTIFF's date tag
  (:func:`~rtscore.data.raster.scene_date.date_from_tags`); several scenes give the range of their dates; a scene
  without one is refused, naming it, unless the settings give one base-map date for all;
- ``BaseMapResolution`` the coarsest ground pixel size of the object's scenes (their transforms,
  :func:`~rtscore.data.raster.ground.ground_pixel_area_m2`), in metres to :data:`RESOLUTION_DECIMALS` decimals,
  unless the settings give one;
- ``RegionName`` the settings' region, else the objects layer's ``RegionName`` / ``region`` column, else the
  review's region of the object;
- ``CentroidLat``, ``CentroidLon``, ``UID`` exactly as ARTS computes them (rtscore.data.inventory.arts), ``Area``
  in m² in an equal-area projection, ``BaseMapID`` the scene ids, ``LabelType`` Polygon.

With a prior ARTS file, each new feature's ``UnknownRelationship`` lists the prior features it overlaps, and a
relationships CSV lists each pair (rtscore.review.arts_prior). The contribution is checked
with the ARTS check before it replaces anything (``rtscore.data.inventory.check``), then renamed into place.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field, field_validator

from rtscore.config.base import StrictModel
from rtscore.data.inventory.arts import (
    ALL_FIELDS,
    ARTS_CRS,
    ARTS_CRS_URN,
    NEGATIVE,
    POLYGON,
    POSITIVE,
    DateError,
    DateRange,
    arts_uid,
    centroid_lat_lon,
    equal_area_m2,
    parse_date_range,
    reproject,
)
from rtscore.data.inventory.check import check_arts
from rtscore.data.raster.ground import ground_pixel_area_m2
from rtscore.data.raster.scene_date import date_from_tags
from rtscore.errors import PipelineError
from rtscore.mapping.campaign import INDEX_FILE, OBJECTS_FILE
from rtscore.mapping.objects_layer import OBJECTS_LAYER
from rtscore.mapping.polygons import RtsObject
from rtscore.mapping.scenes import read_scene_dates
from rtscore.review.arts_prior import (
    AREA_DECIMALS,
    ArtsExportError,
    NewFeature,
    read_prior,
    relate,
    write_relationships,
)
from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    ReviewHeader,
    ReviewObject,
    iter_objects,
    read_header,
)
from rtscore.review.objects_columns import ObjectColumns, read_columns, read_rows
from rtscore.review.scene_plan import SceneRef, read_index
from rtscore.review.verdict_file import read_verdicts
from rtscore.review.verdicts import Verdict
from rtscore.storage import sha256_file
from rtscore.storage.files import os_errors

_log = logging.getLogger(__name__)

VERDICT_CLASSES = {"rts": POSITIVE, "not_rts": NEGATIVE}  # unsure: left out
REGION_COLUMNS = ("RegionName", "region")  # an objects layer's own region column, when a person added one
RESOLUTION_DECIMALS = 2  # BaseMapResolution: centimetres


class ContributionSettings(StrictModel):
    """What the campaign cannot say about its objects: who contributes them, from which sensor, and the fields
    given for every feature instead of read from the scenes."""

    creator: str = Field(..., min_length=1, description="CreatorLab: the lab or person contributing.")
    source: str = Field(..., min_length=1, description="BaseMapSource: the imagery's sensor, e.g. PlanetScope.")
    region: str | None = Field(None, min_length=1, description="RegionName of every feature (None: per object).")
    base_map_date: str | None = Field(
        None, description="BaseMapDate of every feature, YYYY-MM-DD or two dates separated by a comma (None: scenes')."
    )
    resolution: float | None = Field(None, gt=0, description="BaseMapResolution in metres (None: the scenes').")
    contribution_date: dt.date = Field(default_factory=dt.date.today, description="ContributionDate.")
    include_unreviewed: bool = Field(False, description="Export objects without a verdict too (Positive, noted).")

    @field_validator("base_map_date")
    @classmethod
    def _strict_date(cls, v: str | None) -> str | None:
        if v is None:
            return None
        try:
            return parse_date_range(v, strict=True).text()
        except DateError as err:
            raise ValueError(f"base-map date: {err}") from None


class ArtsExportResult(StrictModel):
    """What :func:`export_arts` wrote."""

    output: str
    features: int = Field(..., ge=0)
    positive: int = Field(..., ge=0)
    negative: int = Field(..., ge=0)
    unreviewed: int = Field(..., ge=0, description="Positive features nobody judged (include_unreviewed).")
    left_out: dict[str, int] = Field(..., description="Objects not exported: unsure, unreviewed.")
    relationships: str | None = Field(None, description="The relationships CSV (None: no prior file).")
    overlapping: int = Field(0, ge=0, description="New features overlapping a prior one.")

    def summary_line(self) -> str:
        left = ", ".join(f"{n} {k}" for k, n in self.left_out.items() if n)
        rel = (
            f"; {self.overlapping} overlap a prior feature: sort the pairs in {self.relationships}"
            if self.relationships
            else ""
        )
        return (
            f"wrote {self.output}: {self.features} ARTS features ({self.positive} Positive, {self.negative} "
            f"Negative; {self.unreviewed} unreviewed){f'; left out: {left}' if left else ''}{rel}"
        )


@dataclass(frozen=True)
class SceneFacts:
    """What a feature takes from one scene: its acquisition date and ground pixel size (None: not read)."""

    scene_id: str
    date: dt.date | None
    resolution_m: float | None


@dataclass
class _Review:
    """What the verdicts and the review say about the campaign's objects."""

    verdicts: dict[int, Verdict] = field(default_factory=dict)
    review_id: str | None = None
    manifest: dict[int, ReviewObject] = field(default_factory=dict)


@dataclass
class _Feature:
    """One feature being built: its object, class, note, geometry in EPSG:3413, properties, area."""

    obj: RtsObject
    train_class: str
    notes: list[str]
    geom: Any
    props: dict[str, Any] = field(default_factory=dict)
    area_m2: float = 0.0


def export_arts(
    campaign: str | Path,
    output: str | Path,
    settings: ContributionSettings,
    *,
    verdicts: str | Path | None = None,
    review: str | Path | None = None,
    prior: str | Path | None = None,
    scene_list: str | None = None,
) -> ArtsExportResult:
    """Write the ARTS contribution of ``campaign``'s objects to ``output`` (module docstring).

    Args:
        campaign: The campaign's local output root (``rts map --output``): ``objects.gpkg``, ``index.geojson``.
        output: The contribution GeoJSON.
        settings: Creator, sensor, and fields given instead of read.
        verdicts: A verdict file of a review of this campaign (the review page's GeoJSON or a Label Studio export).
        review: That review's directory: its regions and the inventory ids each object overlaps.
        prior: An ARTS file (the main file): each new feature's overlaps are proposed, never decided.
        scene_list: The scene list CSV the campaign mapped, for its ``date`` column.

    Raises:
        ArtsExportError: no objects.gpkg, verdicts or a review of other objects, a prior file that is not ARTS, an
            object without a region or a scene without a date (named), nothing to export.
    """
    root = Path(campaign)
    objects_path = root / OBJECTS_FILE
    if not objects_path.is_file():
        raise ArtsExportError(
            f"campaign {root} has no {OBJECTS_FILE}; is it the --output of `rts map`, and has a scene been mapped?"
        )
    layer = _read_columns(objects_path)
    crs = layer.crs
    sha = sha256_file(objects_path)
    prior_features = read_prior(Path(prior)) if prior is not None else None
    judged = _read_review(verdicts, review, sha, set(layer.attrs.object_id.tolist()))
    chosen, left_out = _choose(layer, judged, settings.include_unreviewed, sha[:12])
    regions = _regions(chosen, objects_path, judged, settings.region)
    scenes = _scene_facts(root, [f.obj for f in chosen], scene_list, settings)
    for f in chosen:
        _fill(f, crs, regions[f.obj.object_id], scenes, settings)
    _check_unique(chosen)
    out = Path(output)
    pairs = _relate(chosen, prior_features) if prior_features is not None else None
    write_contribution(out, [(f.props, f.geom) for f in chosen])
    rel_path = None
    if pairs is not None:  # after the contribution: never a relationships file for a contribution not written
        rel_path = write_relationships(out, pairs)
    classes = Counter(f.train_class for f in chosen)
    return ArtsExportResult(
        output=str(out),
        features=len(chosen),
        positive=classes[POSITIVE],
        negative=classes[NEGATIVE],
        unreviewed=sum(1 for f in chosen if f.obj.object_id not in judged.verdicts),
        left_out=left_out,
        relationships=None if rel_path is None else str(rel_path),
        overlapping=sum(1 for f in chosen if f.props["UnknownRelationship"]),
    )


# ------------------------------------------------------------------------------------------------ inputs
def _read_columns(path: Path) -> ObjectColumns:
    try:
        return read_columns(path)
    except PipelineError as err:
        raise ArtsExportError(str(err)) from None


def _read_review(verdicts: str | Path | None, review: str | Path | None, sha: str, ids: set[int]) -> _Review:
    """The verdicts (checked to be of the objects ``ids``) and the review's manifest, by object id."""
    out = _Review()
    header = None
    if review is not None:
        rdir = Path(review)
        header = read_header(rdir / HEADER_FILE)
        if header.campaign.objects_sha256 != sha:
            raise ArtsExportError(
                f"review {rdir} was exported from other objects (sha256 {header.campaign.objects_sha256[:12]}) than "
                f"the campaign's {OBJECTS_FILE} (sha256 {sha[:12]}): the campaign was mapped again since; export "
                "without it, or review the campaign as it is"
            )
        out.manifest = {o.object_id: o for o in iter_objects(rdir / MANIFEST_FILE)}
    if verdicts is not None:
        out.verdicts, out.review_id = _verdicts(Path(verdicts), header, sha, ids)
    return out


def _verdicts(path: Path, header: ReviewHeader | None, sha: str, ids: set[int]) -> tuple[dict[int, Verdict], str]:
    """The verdicts of ``path`` by object id, refused when they belong to another review or other objects."""
    vs = read_verdicts(path)
    if header is not None and vs.review_id != header.review_id:
        raise ArtsExportError(
            f"{path}: verdicts of review {vs.review_id[:12]}, not of the review given ({header.review_id[:12]}): "
            "verdicts of another review"
        )
    if vs.objects_sha256 is None and header is None:
        raise ArtsExportError(
            f"{path}: the verdicts do not name the campaign objects they judged; give --review, the review directory "
            "they belong to"
        )
    if vs.objects_sha256 is not None and vs.objects_sha256 != sha:
        raise ArtsExportError(
            f"{path}: verdicts of another review: they judged objects with sha256 {vs.objects_sha256[:12]}, the "
            f"campaign's {OBJECTS_FILE} has sha256 {sha[:12]} (mapped again since, or another campaign)"
        )
    unknown = sorted(v.object_id for v in vs.verdicts if v.object_id not in ids)
    if unknown:
        raise ArtsExportError(f"{path}: object(s) {unknown[:10]} are not in the campaign's {OBJECTS_FILE}")
    return {v.object_id: v for v in vs.verdicts}, vs.review_id


def _choose(
    layer: ObjectColumns, judged: _Review, include_unreviewed: bool, campaign: str
) -> tuple[list[_Feature], dict[str, int]]:
    """The objects exported (in the layer's order; only they are read whole), each with its class and the note
    saying how it was judged (``campaign``: the first 12 hex digits of its objects.gpkg's sha256, the campaign's id
    in reviews); the counts left out."""
    rows: list[int] = []
    left = Counter({"unsure": 0, "unreviewed": 0})
    for row, oid in enumerate(layer.attrs.object_id.tolist()):
        v = judged.verdicts.get(oid)
        if v is None and not include_unreviewed:
            left["unreviewed"] += 1
        elif v is not None and v.verdict not in VERDICT_CLASSES:
            left["unsure"] += 1
        else:
            rows.append(row)
    if not rows:
        hint = "" if include_unreviewed else "; pass --include-unreviewed to export the model's detections"
        raise ArtsExportError(
            f"nothing to export: {len(layer)} object(s), {len(judged.verdicts)} judged, none rts or not_rts{hint}"
        )
    try:
        objects = read_rows(layer, np.asarray(rows, dtype=np.int64))
    except PipelineError as err:
        raise ArtsExportError(str(err)) from None
    chosen = []
    for o in objects:
        v = judged.verdicts.get(o.object_id)
        cls = POSITIVE if v is None else VERDICT_CLASSES[v.verdict]
        chosen.append(_Feature(o, cls, _notes(o, v, judged, campaign), None))
    return chosen, dict(left)


def _notes(o: RtsObject, v: Verdict | None, judged: _Review, campaign: str) -> list[str]:
    """How the object was judged (or that nobody did), and the inventory polygons the review found it overlaps."""
    notes = []
    if v is None:
        notes.append(
            f"unreviewed model detection (p_mean={o.prob_mean:.3f}, campaign {campaign}, object {o.object_id})"
        )
    else:
        who = v.reviewer or "an unnamed reviewer"
        said = f": {v.note.strip()}" if v.note.strip() else ""
        rid = (judged.review_id or "")[:12]
        notes.append(f"reviewed {v.verdict} by {who} (review {rid}, campaign {campaign}, object {o.object_id}){said}")
    seen = judged.manifest.get(o.object_id)
    if seen is not None and seen.inventory_uids:
        notes.append(f"overlaps inventory {', '.join(seen.inventory_uids)}")
    return notes


def _regions(chosen: Sequence[_Feature], objects_path: Path, judged: _Review, region: str | None) -> dict[int, str]:
    """Each exported object's RegionName: ``region``, else the objects layer's region column, else the review's."""
    ids = [f.obj.object_id for f in chosen]
    if region is not None:
        return dict.fromkeys(ids, region)
    own = _layer_regions(objects_path)
    out: dict[int, str] = {}
    for i in ids:
        seen = judged.manifest.get(i)
        name = own.get(i) or (seen.region if seen is not None else None)
        if name:
            out[i] = name
    missing = [i for i in ids if i not in out]
    if missing:
        raise ArtsExportError(
            f"object(s) {missing[:10]}{' and more' if len(missing) > 10 else ''} have no region: give --region, a "
            f"{' or '.join(REGION_COLUMNS)} column in {objects_path}, or --review of a review exported with a "
            "tiling config"
        )
    return out


def _layer_regions(path: Path) -> dict[int, str]:
    """Object id -> the objects layer's own region column (a person may add one in GIS); empty without one."""
    import pyogrio

    names = [str(f) for f in pyogrio.read_info(path, layer=OBJECTS_LAYER)["fields"]]
    col = next((c for c in REGION_COLUMNS if c in names), None)
    if col is None:
        return {}
    _, _, _, (ids, values) = pyogrio.raw.read(
        path, layer=OBJECTS_LAYER, columns=["object_id", col], read_geometry=False
    )
    return {int(i): str(v).strip() for i, v in zip(ids, values, strict=True) if v is not None and str(v).strip()}


# ------------------------------------------------------------------------------------------------ scenes
def _scene_facts(
    root: Path, objects: Sequence[RtsObject], scene_list: str | None, settings: ContributionSettings
) -> dict[str, SceneFacts]:
    """Date and ground pixel size of every scene of the exported objects, each read only when a field needs it."""
    need_date, need_res = settings.base_map_date is None, settings.resolution is None
    if not (need_date or need_res):
        return {}
    index = read_index(root / INDEX_FILE) if (root / INDEX_FILE).is_file() else {}
    listed = read_scene_dates(scene_list) if scene_list is not None and need_date else {}
    facts: dict[str, SceneFacts] = {}
    for o in objects:
        for sid in o.scene_ids:
            if sid in facts:
                continue
            if sid not in index:
                raise ArtsExportError(
                    f"object {o.object_id}: its scene {sid} is not in the campaign's {INDEX_FILE}; map the campaign "
                    "again (rts map), or give --base-map-date and --resolution"
                )
            known = listed.get(sid)
            if known is not None and not need_res:
                facts[sid] = SceneFacts(sid, known, None)
            else:
                facts[sid] = _read_scene(index[sid], known, need_date=need_date, need_res=need_res)
    undated = sorted(s.scene_id for s in facts.values() if need_date and s.date is None)
    if undated:
        uris = ", ".join(f"{s} ({index[s].uri})" for s in undated[:10])
        raise ArtsExportError(
            f"scene(s) {uris} have no acquisition date: no date column in a scene list (--scene-list) and no "
            "ACQUISITION_DATE or TIFFTAG_DATETIME tag; give --base-map-date"
        )
    return facts


def _read_scene(scene: SceneRef, known: dt.date | None, *, need_date: bool, need_res: bool) -> SceneFacts:
    """A scene's date (``known`` from the scene list, else its tags) and ground pixel size, from its GeoTIFF."""
    import rasterio

    try:
        with rasterio.open(scene.uri) as ds:
            date = known if known is not None or not need_date else date_from_tags(ds.tags(), scene.uri)[0]
            res = None
            if need_res:
                res = round(
                    math.sqrt(ground_pixel_area_m2(ds.crs, ds.transform, ds.height, ds.width, scene.uri)),
                    RESOLUTION_DECIMALS,
                )
    except (rasterio.errors.RasterioError, PipelineError) as err:
        raise ArtsExportError(
            f"scene {scene.scene_id} ({scene.uri}) cannot be read for its date and pixel size: {err}; give "
            "--base-map-date and --resolution"
        ) from None
    return SceneFacts(scene.scene_id, date, res)


# ------------------------------------------------------------------------------------------------ features
def _fill(f: _Feature, crs: Any, region: str, scenes: Mapping[str, SceneFacts], settings: ContributionSettings) -> None:
    """The feature's geometry in EPSG:3413 and its ARTS properties, in ARTS's field order."""
    o = f.obj
    geom = o.geometry
    if geom.geom_type == "MultiPolygon" and len(geom.geoms) == 1:
        geom = geom.geoms[0]
    f.geom = reproject(geom, crs, ARTS_CRS)
    lat, lon = centroid_lat_lon(f.geom, ARTS_CRS)
    facts = [scenes[s] for s in o.scene_ids if s in scenes]
    if settings.base_map_date is not None:
        date = settings.base_map_date
    else:
        dates = [s.date for s in facts if s.date is not None]
        date = DateRange(min(dates), max(dates)).text()
    res = settings.resolution if settings.resolution is not None else max(s.resolution_m or 0.0 for s in facts)
    f.area_m2 = equal_area_m2(f.geom, ARTS_CRS)
    fields: dict[str, Any] = {
        "CentroidLat": lat,
        "CentroidLon": lon,
        "RegionName": region,
        "CreatorLab": settings.creator,
        "BaseMapDate": date,
        "BaseMapSource": settings.source,
        "BaseMapResolution": int(res) if float(res).is_integer() else res,
        "TrainClass": f.train_class,
        "LabelType": POLYGON,
    }
    f.props = dict.fromkeys(ALL_FIELDS)
    f.props.update(fields)
    f.props["ContributionDate"] = settings.contribution_date.isoformat()
    f.props["UID"] = arts_uid(fields)
    f.props["BaseMapID"] = ",".join(o.scene_ids)
    f.props["Area"] = round(f.area_m2, AREA_DECIMALS)
    f.props["Notes"] = "; ".join(f.notes)


def _check_unique(features: Sequence[_Feature]) -> None:
    """Two objects with the same required fields would share a UID (ARTS's rule): refused, naming both."""
    seen: dict[str, int] = {}
    for f in features:
        uid, oid = f.props["UID"], f.obj.object_id
        if uid in seen:
            raise ArtsExportError(
                f"objects {seen[uid]} and {oid} have the same ARTS fields (centroid, region, dates, ...), so the same "
                f"UID {uid}; ARTS needs them distinct"
            )
        seen[uid] = oid


def _relate(chosen: Sequence[_Feature], prior: tuple[list[str], list[Any]]) -> list[tuple[Any, ...]]:
    """Each feature's UnknownRelationship set from its overlaps with the prior file's features; the rows of the
    relationships CSV (rtscore.review.arts_prior)."""
    new = [NewFeature(f.props["UID"], f.obj.object_id, f.geom, f.area_m2) for f in chosen]
    relationships, rows = relate(new, *prior)
    for f in chosen:
        f.props["UnknownRelationship"] = relationships.get(f.props["UID"], f.props["UnknownRelationship"])
    return rows


# ------------------------------------------------------------------------------------------------ writing
def contribution_text(features: Sequence[tuple[Mapping[str, Any], Any]], name: str) -> str:
    """The GeoJSON text of a contribution of (properties, shapely geometry in EPSG:3413) pairs: ARTS's ``crs``
    member, one feature a line, properties in the order given."""
    from shapely.geometry import mapping

    head = {"type": "FeatureCollection", "name": name, "crs": {"type": "name", "properties": {"name": ARTS_CRS_URN}}}
    lines = [
        json.dumps({"type": "Feature", "properties": dict(props), "geometry": mapping(geom)}, allow_nan=False)
        for props, geom in features
    ]
    return json.dumps(head)[:-1] + ', "features": [\n' + ",\n".join(lines) + "\n]}\n"


def write_contribution(path: Path, features: Sequence[tuple[Mapping[str, Any], Any]]) -> None:
    """Write the contribution under a temporary name beside ``path``, check it with the ARTS check, then rename it
    into place: a file that breaks a rule never replaces anything (it would be a bug here: raised, listing them)."""
    tmp = path.with_name(f".{path.stem}.{uuid.uuid4().hex[:8]}.partial.geojson")
    with os_errors("write", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.write_text(contribution_text(features, path.stem), encoding="utf-8")
            result = check_arts(tmp)
            if not result.ok:
                lines = "; ".join(p.line() for p in result.problems[:10])
                raise ArtsExportError(f"{path}: the contribution breaks the ARTS rules (a bug): {lines}")
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
