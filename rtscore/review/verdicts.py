"""Reviewers' verdicts: the file the review page exports, and reading it (or a Label Studio export) back.

The review page (rtscore.review.page) exports a GeoJSON FeatureCollection (RFC 7946: lon/lat), one feature per
object judged, with the review it belongs to in a foreign member ``rts_review``:

```
{"type": "FeatureCollection",
 "rts_review": {"schema_version": 1, "review_id": "...", "objects_sha256": "...", "package_sha256": "...",
                "reviewer": "ab", "exported": "2026-12-02T07:10:00Z"},
 "features": [{"type": "Feature", "geometry": <the object's outline, EPSG:4326>,
               "properties": {"object_id": 12, "verdict": "rts", "reviewer": "ab",
                              "time": "2026-12-02T07:09:41Z", "note": ""}}, ...]}
```

Every key of :data:`REQUIRED_HEADER` is required in ``rts_review`` (a missing one is refused by name): the review
and the campaign objects and package its verdicts were made on, checked against the review by ingest.
``verdict`` is one of :data:`VERDICTS`: ``rts`` (a true slump: joins the inventory), ``not_rts`` (a false positive:
a hard negative), ``unsure`` (left out). Objects skipped on the page are not in the file. A Label Studio JSON export
of the tasks ``rts review export`` wrote is read too (rtscore.review.label_studio);
:func:`rtscore.review.verdict_file.read_verdicts` reads either.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from rtscore.config.base import StrictModel
from rtscore.review.manifest import SCHEMA_VERSION, ReviewError, ReviewHeader, ReviewObject

VERDICTS: tuple[str, ...] = ("rts", "not_rts", "unsure")
VerdictValue = Literal["rts", "not_rts", "unsure"]
REVIEW_MEMBER = "rts_review"
# The keys of the header a verdict file must hold (docs/review.md, "The verdict file"): ingest and `rts arts export`
# check the file against its review by them. ``reviewer`` and ``exported``, which the page writes too, are a record.
REQUIRED_HEADER: tuple[str, ...] = ("schema_version", "review_id", "objects_sha256", "package_sha256")


class Verdict(StrictModel):
    """One object's verdict."""

    object_id: int = Field(..., ge=1)
    verdict: VerdictValue
    reviewer: str = Field("", description="Who judged it (as typed on the page, or the Label Studio user).")
    time: str = Field("", description="When, ISO 8601 UTC.")
    note: str = ""


class VerdictSet(StrictModel):
    """The verdicts of one file, with the review they claim to belong to."""

    source: str = Field(..., description="The file read.")
    format: Literal["geojson", "label-studio"]
    review_id: str
    objects_sha256: str | None = None
    package_sha256: str | None = None
    verdicts: list[Verdict]


def from_geojson(data: dict[str, Any], p: Path) -> VerdictSet:
    if data.get("type") != "FeatureCollection":
        raise ReviewError(f"{p}: not a GeoJSON FeatureCollection (type is {data.get('type')!r})")
    features = data.get("features")
    if not isinstance(features, list):
        raise ReviewError(f"{p}: not valid GeoJSON: 'features' must be a list")
    head = checked_header(data.get(REVIEW_MEMBER), p)
    verdicts = [_feature_verdict(f, i, p) for i, f in enumerate(features)]
    return VerdictSet(
        source=str(p),
        format="geojson",
        review_id=head["review_id"],
        objects_sha256=head["objects_sha256"],
        package_sha256=head["package_sha256"],
        verdicts=unique(verdicts, p),
    )


def checked_header(head: Any, p: Path) -> dict[str, Any]:
    """The verdict file's header (``rts_review``), every key of :data:`REQUIRED_HEADER` present and of its type.

    Raises:
        ReviewError: no header, a key missing (each missing key named), a schema version other than this code's, a
            review id or sha256 that is not a non-empty text; the file named.
    """
    wanted = ", ".join(REQUIRED_HEADER)
    if not isinstance(head, dict):
        raise ReviewError(
            f"{p}: no '{REVIEW_MEMBER}' header: not a file the review page exported (its header names the review "
            f"the verdicts belong to: {wanted})"
        )
    missing = [f"{REVIEW_MEMBER}.{k}" for k in REQUIRED_HEADER if k not in head]
    if missing:
        raise ReviewError(
            f"{p}: the header lacks {', '.join(missing)}: the review page writes {wanted} (the review, campaign "
            "objects and package the verdicts were made on, checked against the review); export the verdicts again"
        )
    if isinstance(head["schema_version"], bool) or head["schema_version"] != SCHEMA_VERSION:
        raise ReviewError(f"{p}: {REVIEW_MEMBER}.schema_version {head['schema_version']!r} is not {SCHEMA_VERSION}")
    for key in REQUIRED_HEADER[1:]:
        if not isinstance(head[key], str) or not head[key].strip():
            raise ReviewError(f"{p}: {REVIEW_MEMBER}.{key} must be a non-empty text, got {head[key]!r}")
    return head


def _feature_verdict(f: Any, i: int, p: Path) -> Verdict:
    import shapely.geometry

    where = f"{p}: features[{i}]"
    if not isinstance(f, dict) or f.get("type") != "Feature":
        raise ReviewError(f"{where}: not valid GeoJSON: a feature is an object with type 'Feature'")
    props = f.get("properties")
    if not isinstance(props, dict):
        raise ReviewError(f"{where}: not valid GeoJSON: 'properties' must be an object")
    oid = props.get("object_id")
    if isinstance(oid, bool) or not isinstance(oid, int) or oid < 1:
        raise ReviewError(f"{where}: 'object_id' must be a positive integer, got {oid!r}")
    where = f"{where} (object {oid})"
    if "geometry" not in f:
        raise ReviewError(f"{where}: not valid GeoJSON: a feature has a 'geometry' member (null or a geometry)")
    if f["geometry"] is not None:
        try:
            geom = shapely.geometry.shape(f["geometry"])
        except Exception as err:  # shapely raises several types for malformed GeoJSON
            raise ReviewError(f"{where}: not valid GeoJSON geometry ({err})") from None
        if geom.is_empty:
            raise ReviewError(f"{where}: empty geometry")
    verdict = props.get("verdict")
    if verdict not in VERDICTS:
        raise ReviewError(f"{where}: verdict {verdict!r} is not one of {', '.join(VERDICTS)}")
    return Verdict(
        object_id=oid,
        verdict=verdict,
        reviewer=str(props.get("reviewer") or ""),
        time=str(props.get("time") or ""),
        note=str(props.get("note") or ""),
    )


def unique(verdicts: list[Verdict], p: Path) -> list[Verdict]:
    """``verdicts`` sorted by object id; an object judged twice in one file is refused (which one holds?)."""
    seen: dict[int, Verdict] = {}
    for v in verdicts:
        if v.object_id in seen:
            raise ReviewError(
                f"{p}: object {v.object_id} is judged twice ({seen[v.object_id].verdict} and {v.verdict}); keep one"
            )
        seen[v.object_id] = v
    return [seen[k] for k in sorted(seen)]


def verdicts_geojson(
    header: ReviewHeader, objects: Iterable[ReviewObject], verdicts: Iterable[Verdict], *, reviewer: str, exported: str
) -> dict[str, Any]:
    """The verdict file the review page exports, built in Python (the page's JavaScript writes the same document:
    tests read both through :func:`read_verdicts`)."""
    by_id = {o.object_id: o for o in objects}
    return {
        "type": "FeatureCollection",
        REVIEW_MEMBER: {
            "schema_version": SCHEMA_VERSION,
            "review_id": header.review_id,
            "objects_sha256": header.campaign.objects_sha256,
            "package_sha256": header.campaign.package_sha256,
            "reviewer": reviewer,
            "exported": exported,
        },
        "features": [
            {"type": "Feature", "geometry": by_id[v.object_id].geometry, "properties": v.model_dump(mode="json")}
            for v in verdicts
        ],
    }
