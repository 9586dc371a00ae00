"""The inputs of `rts review ingest`, read and checked against each other before anything is written: the review
export (``review.json``, ``manifest.jsonl``), the verdict file and the campaign (still holding the objects layer the
review was exported from, mapped by the same package)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rtscore.mapping.campaign import OBJECTS_FILE, SUMMARY_JSON, MappedWith
from rtscore.mapping.outputs import CampaignRoot
from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, ReviewError, ReviewHeader, ReviewObject, iter_objects
from rtscore.review.manifest import read_header as read_header_file
from rtscore.review.verdict_file import read_verdicts
from rtscore.review.verdicts import VerdictSet
from rtscore.storage.files import sha256_file


@dataclass
class ReviewInputs:
    """A review, its verdicts and the campaign, checked against each other."""

    header: ReviewHeader
    header_path: str
    manifest_path: str
    objects: dict[int, ReviewObject]
    verdict_set: VerdictSet
    verdicts_path: Path
    verdicts_sha256: str
    campaign: str


def read_review(review: str, verdicts: str, campaign: str | None) -> ReviewInputs:
    """The review's header and manifest, the verdicts and the campaign, each checked against the others."""
    root = CampaignRoot(review)
    header_path = root.fetch(HEADER_FILE) or root.path(HEADER_FILE)
    header = read_header_file(header_path)
    manifest_path = root.fetch(MANIFEST_FILE) or root.path(MANIFEST_FILE)
    objects = {o.object_id: o for o in iter_objects(manifest_path)}
    hname, mname = root.uri_of(HEADER_FILE), root.uri_of(MANIFEST_FILE)
    vpath = Path(verdicts)
    vs = read_verdicts(vpath)
    _check_some_verdicts(vs, vpath)
    if vs.review_id != header.review_id:
        raise ReviewError(
            f"{vpath}: verdicts of another review: the file names review {vs.review_id[:12]}, {hname} is review "
            f"{header.review_id[:12]}; ingest verdicts with the review they were made on"
        )
    for key, want in (
        ("objects_sha256", header.campaign.objects_sha256),
        ("package_sha256", header.campaign.package_sha256),
    ):
        got = getattr(vs, key)
        if got is not None and got != want:
            raise ReviewError(
                f"{vpath}: its {key} {got[:12]} is not the one of {hname} ({want[:12]}): verdicts of another "
                "campaign or package"
            )
    unknown = [v.object_id for v in vs.verdicts if v.object_id not in objects]
    if unknown:
        raise ReviewError(
            f"{vpath}: object(s) {unknown[:20]} not in the review manifest {mname} ({len(objects)} objects): "
            "verdicts edited or of another export"
        )
    where = campaign if campaign is not None else header.campaign.uri
    _check_campaign(where, header, hname)
    return ReviewInputs(header, hname, mname, objects, vs, vpath, sha256_file(vpath), where)


def _check_some_verdicts(vs: VerdictSet, vpath: Path) -> None:
    """A verdict file judging no object is refused: ingesting it would record a dataset version with the review
    ingested and nothing in it."""
    if not vs.verdicts:
        held = "no feature" if vs.format == "geojson" else "no task with a verdict"
        raise ReviewError(
            f"{vpath}: holds no verdict ({held}): nothing to ingest; judge objects on the review page (or in Label "
            "Studio) and export the verdicts again"
        )


def _check_campaign(uri: str, header: ReviewHeader, hname: str) -> None:
    """The campaign still holds the objects layer and the package the review was exported from."""
    root = CampaignRoot(uri)
    objects = root.fetch(OBJECTS_FILE)
    if objects is None:
        raise ReviewError(
            f"{root.uri_of(OBJECTS_FILE)}: not found; the review {hname} was exported from campaign "
            f"{header.campaign.uri} (give the campaign's location if it moved)"
        )
    sha = sha256_file(objects)
    if sha != header.campaign.objects_sha256:
        raise ReviewError(
            f"{root.uri_of(OBJECTS_FILE)}: sha256 {sha[:12]} is not the one {hname} was exported from "
            f"({header.campaign.objects_sha256[:12]}): the campaign was mapped again since the export: object ids "
            "may name other objects; export again"
        )
    summary = root.fetch(SUMMARY_JSON)
    package = None
    if summary is not None:
        try:
            package = MappedWith.model_validate_json(summary.read_text()).package_sha256
        except (OSError, ValueError):  # unreadable, not JSON, not a summary: names no package
            package = None
    if package != header.campaign.package_sha256:
        raise ReviewError(
            f"{root.uri_of(SUMMARY_JSON)}: the campaign names package {str(package)[:12]}, {hname} was exported from "
            f"package {header.campaign.package_sha256[:12]}: another package mapped it; export again"
        )
