"""Label Studio: the review's chips as Label Studio tasks, and a Label Studio JSON export read back as verdicts.

:func:`write_tasks` writes ``<review>/label-studio/config.xml`` (the labelling interface: the chip, the candidate's
outline as an editable pre-annotation, one required choice RTS / not RTS / unsure, an optional note) and
``<review>/label-studio/tasks.json`` (one task per object, in Label Studio's basic JSON task format: ``data`` and
``predictions``; region coordinates in percent of the chip's size, as Label Studio stores image regions).

:func:`verdicts_from_label_studio` reads the project's export in Label Studio's "JSON" format (a list of tasks, each
with its ``data`` and ``annotations[].result[]``) back as a :class:`~rtscore.review.verdicts.VerdictSet`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from rtscore.review.manifest import (
    HEADER_FILE,
    LABEL_STUDIO_DIR,
    MANIFEST_FILE,
    ReviewError,
    ReviewHeader,
    ReviewObject,
    iter_objects,
    object_facts,
    read_header,
)
from rtscore.review.verdicts import Verdict, VerdictSet, VerdictValue, unique
from rtscore.storage.files import atomic_write_text

CONFIG_FILE = "config.xml"
TASKS_FILE = "tasks.json"
IMAGE_NAME = "image"
OUTLINE_NAME = "candidate"
OUTLINE_LABEL = "RTS candidate"
VERDICT_NAME = "verdict"
NOTE_NAME = "note"
CHOICES: dict[str, VerdictValue] = {"RTS": "rts", "not RTS": "not_rts", "unsure": "unsure"}

CONFIG_XML = f"""<View>
  <Header value="$title"/>
  <Image name="{IMAGE_NAME}" value="$image" zoom="true" zoomControl="true" smoothing="false"/>
  <PolygonLabels name="{OUTLINE_NAME}" toName="{IMAGE_NAME}" strokeWidth="2" opacity="0.15">
    <Label value="{OUTLINE_LABEL}" background="#ffd400"/>
  </PolygonLabels>
  <Choices name="{VERDICT_NAME}" toName="{IMAGE_NAME}" choice="single" required="true" showInline="true"
           requiredMessage="Choose RTS, not RTS or unsure">
    <Choice value="RTS" hotkey="1"/>
    <Choice value="not RTS" hotkey="2"/>
    <Choice value="unsure" hotkey="3"/>
  </Choices>
  <TextArea name="{NOTE_NAME}" toName="{IMAGE_NAME}" placeholder="note (optional)" maxSubmissions="1" editable="true"/>
  <Text name="facts" value="$facts"/>
</View>
"""


def default_image_root(review_dir: Path) -> str:
    """Label Studio's local-files URL of the review directory (served when Label Studio runs with
    ``LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED=true`` and ``LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT`` set to the
    review directory's parent)."""
    return f"/data/local-files/?d={quote(Path(review_dir).resolve().name)}/"


def _facts(obj: ReviewObject) -> str:
    parts = [
        f"object {obj.object_id}",
        f"scene {obj.scene_id}",
        f"region {obj.region or '-'}",
        f"split {obj.split or '-'}",
        *([f"inventory {', '.join(obj.inventory_uids)}"] if obj.inventory_uids else []),
        f"prob mean {obj.prob_mean:.3f} max {obj.prob_max:.3f}",
        f"ground area {obj.ground_area_m2:,.0f} m²",
        f"size bin {obj.size_bin or '-'}",
    ]
    if obj.partial:
        parts.append("partial (cut by the scene edge)")
    parts.append(f"pixel {obj.pixel_ground_m:.2f} m")
    return " · ".join(parts)


def _ring_percent(ring: list[list[float]], w: int, h: int) -> list[list[float]]:
    pts = [[round(100.0 * x / w, 4), round(100.0 * y / h, 4)] for x, y, *_ in ring]
    if len(pts) > 1 and pts[0] == pts[-1]:
        pts = pts[:-1]  # Label Studio closes a polygon itself
    return pts


def task(obj: ReviewObject, header: ReviewHeader, image_root: str) -> dict[str, Any]:
    """One Label Studio task: the chip, the object's facts, and its outline as a prediction."""
    w, h = obj.chip_window[2], obj.chip_window[3]
    result = [
        {
            "id": f"o{obj.object_id}r{i}",
            "type": "polygonlabels",
            "from_name": OUTLINE_NAME,
            "to_name": IMAGE_NAME,
            "original_width": w,
            "original_height": h,
            "image_rotation": 0,
            "value": {"points": _ring_percent(ring, w, h), "closed": True, "polygonlabels": [OUTLINE_LABEL]},
        }
        for i, ring in enumerate(obj.chip_outline)
        if len(ring) >= 3
    ]
    return {
        "data": {
            "image": image_root + obj.chip,
            "title": f"Object {obj.object_id}: RTS, not RTS or unsure?",
            "facts": _facts(obj),
            **object_facts(obj),
            "review_id": header.review_id,
            "objects_sha256": header.campaign.objects_sha256,
            "package_sha256": header.campaign.package_sha256,
        },
        "predictions": [
            {
                "model_version": f"rts-package-{header.campaign.package_sha256[:12]}",
                "score": obj.prob_mean,
                "result": result,
            }
        ],
    }


def write_tasks(review_dir: Path, *, image_root: str | None = None) -> list[Path]:
    """Write ``label-studio/config.xml`` and ``label-studio/tasks.json`` for the review in ``review_dir``.

    Args:
        review_dir: The review directory (``review.json``, ``manifest.jsonl``, ``chips/``).
        image_root: What each task's image URL starts with, the chip's path (``chips/<id>.png``) following; a
            ``/`` is added unless it ends with ``/`` or ``=``. Default: Label Studio's local-files URL of the review
            directory, ``/data/local-files/?d=<review dir name>/`` (:func:`default_image_root`). For chips in a
            bucket: e.g. ``gs://bucket/reviews/r1/`` with the bucket added to the project as cloud storage.

    Returns:
        The two files written.

    Raises:
        ReviewError: no review header or manifest, or a manifest line that is not a review object (nothing written).
    """
    header = read_header(review_dir / HEADER_FILE)
    root = default_image_root(review_dir) if image_root is None else image_root
    if root and not root.endswith(("/", "=")):
        root += "/"
    tasks = [task(obj, header, root) for obj in iter_objects(review_dir / MANIFEST_FILE)]
    out = review_dir / LABEL_STUDIO_DIR
    config_path, tasks_path = out / CONFIG_FILE, out / TASKS_FILE
    atomic_write_text(config_path, CONFIG_XML)
    atomic_write_text(tasks_path, json.dumps(tasks, indent=1, ensure_ascii=False) + "\n")
    return [config_path, tasks_path]


def verdicts_from_label_studio(data: list[Any], path: Path) -> VerdictSet:
    """The verdicts of a Label Studio JSON export of the tasks :func:`write_tasks` wrote.

    Per task, the latest annotation (by ``updated_at``, else ``created_at``) that was not cancelled holds; its
    ``choices`` result is the verdict (RTS -> rts, not RTS -> not_rts, unsure -> unsure), its ``note`` text the
    note, ``completed_by`` (the user's email, else id) the reviewer. A task without such an annotation, or whose
    annotation has no choice, is left out (not judged).

    Raises:
        ReviewError: not an export of these tasks (no ``data.review_id`` or ``data.object_id``; the first task
            without ``data.objects_sha256`` or ``data.package_sha256``, the export's header), tasks of two
            reviews, a choice that is not one of the three, two choices in one annotation, or an object judged in
            two tasks (the file, the task and the object named).
    """
    if not data:
        raise ReviewError(f"{path}: an empty Label Studio export (no tasks); export the project in the JSON format")
    review_id: str | None = None
    first_task = ""
    hashes: dict[str, str | None] = {"objects_sha256": None, "package_sha256": None}
    verdicts: list[Verdict] = []
    for i, t in enumerate(data):
        label = f"task {t.get('id', f'[{i}]') if isinstance(t, dict) else f'[{i}]'}"
        where = f"{path}: {label}"
        if not isinstance(t, dict) or not isinstance(t.get("data"), dict):
            raise ReviewError(
                f"{where}: no 'data' object: not a Label Studio JSON export (export with the 'JSON' format, not "
                "JSON-MIN or CSV)"
            )
        d = t["data"]
        rid, oid = d.get("review_id"), d.get("object_id")
        if not isinstance(rid, str) or isinstance(oid, bool) or not isinstance(oid, int) or oid < 1:
            raise ReviewError(
                f"{where}: no data.review_id or data.object_id: not a task `rts review export` wrote (import "
                "label-studio/tasks.json of the review into the project)"
            )
        label = f"{label} (object {oid})"
        where = f"{path}: {label}"
        if review_id is None:
            review_id, first_task = rid, label
            hashes = {k: _task_hash(d, k, where) for k in hashes}
        elif rid != review_id:
            raise ReviewError(
                f"{where}: belongs to review {rid[:12]}, but {first_task} to review {review_id[:12]}; a verdict file "
                "holds one review: export one project per review"
            )
        annotation = _latest_annotation(t.get("annotations"), where)
        if annotation is not None:
            v = _verdict(annotation, oid, where)
            if v is not None:
                verdicts.append(v)
    assert review_id is not None
    return VerdictSet(
        source=str(path),
        format="label-studio",
        review_id=review_id,
        objects_sha256=hashes["objects_sha256"],
        package_sha256=hashes["package_sha256"],
        verdicts=unique(verdicts, path),
    )


def _task_hash(d: dict[str, Any], key: str, where: str) -> str:
    """``data.<key>`` of a task (the campaign objects' or the package's sha256 `rts review export` wrote into every
    task: the header of a Label Studio export, checked against the review as the page's file is)."""
    v = d.get(key)
    if not isinstance(v, str) or not v.strip():
        raise ReviewError(
            f"{where}: no data.{key} (got {v!r}): the tasks `rts review export` wrote carry review_id, "
            "objects_sha256 and package_sha256; import label-studio/tasks.json of the review as it is"
        )
    return v


def _when(a: dict[str, Any]) -> str:
    v = a.get("updated_at") or a.get("created_at") or ""
    return v if isinstance(v, str) else ""


def _sort_key(a: dict[str, Any], i: int) -> tuple[datetime, int]:
    """When an annotation was last changed (UTC; a time without a zone is taken as UTC), then its place."""
    try:
        dt = datetime.fromisoformat(_when(a))
    except ValueError:
        return datetime.min.replace(tzinfo=UTC), i
    return (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)), i


def _latest_annotation(annotations: Any, where: str) -> dict[str, Any] | None:
    if annotations is None:
        return None
    if not isinstance(annotations, list):
        raise ReviewError(f"{where}: 'annotations' must be a list")
    kept = [(a, i) for i, a in enumerate(annotations) if isinstance(a, dict) and not a.get("was_cancelled")]
    if not kept:
        return None
    return max(kept, key=lambda ai: _sort_key(*ai))[0]


def _reviewer(completed_by: Any) -> str:
    if isinstance(completed_by, dict):
        email = completed_by.get("email")
        if isinstance(email, str) and email:
            return email
        completed_by = completed_by.get("id")
    return "" if completed_by is None else str(completed_by)


def _verdict(annotation: dict[str, Any], oid: int, where: str) -> Verdict | None:
    results = annotation.get("result")
    if not isinstance(results, list):
        raise ReviewError(f"{where}: annotation {annotation.get('id')}: 'result' must be a list")
    chosen: list[str] = []
    note = ""
    for r in results:
        if not isinstance(r, dict) or not isinstance(r.get("value"), dict):
            continue
        if r.get("type") == "choices":
            choices = r["value"].get("choices")
            if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
                raise ReviewError(f"{where}: annotation {annotation.get('id')}: value.choices must be a list of text")
            chosen += choices
        elif r.get("type") == "textarea" and r.get("from_name") == NOTE_NAME:
            text = r["value"].get("text")
            if isinstance(text, list):
                note = "\n".join(str(x) for x in text)
            elif isinstance(text, str):
                note = text
    if not chosen:
        return None
    if len(set(chosen)) > 1:
        raise ReviewError(f"{where}: two verdicts in one annotation ({', '.join(chosen)}); keep one in Label Studio")
    choice = chosen[0]
    if choice not in CHOICES:
        raise ReviewError(
            f"{where}: choice {choice!r} is not one of {', '.join(map(repr, CHOICES))}; the project's labelling "
            f"config must be {LABEL_STUDIO_DIR}/{CONFIG_FILE} of the review"
        )
    return Verdict(
        object_id=oid,
        verdict=CHOICES[choice],
        reviewer=_reviewer(annotation.get("completed_by")),
        time=_when(annotation),
        note=note,
    )
