"""Label Studio: the tasks and labelling config written for a review, and a Label Studio JSON export read back."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rtscore.review.label_studio import CHOICES, verdicts_from_label_studio, write_tasks
from rtscore.review.manifest import ReviewError, ReviewHeader, ReviewObject
from rtscore.review.verdict_file import read_verdicts

MakeReview = Callable[..., tuple[Path, ReviewHeader, list[ReviewObject]]]


def test_config_xml(make_review: MakeReview) -> None:
    root, _, _ = make_review()
    config, _ = write_tasks(root)
    assert config == root / "label-studio" / "config.xml"
    view = ET.fromstring(config.read_text())
    image = view.find("Image")
    assert image is not None and image.get("value") == "$image" and image.get("name") == "image"
    poly = view.find("PolygonLabels")
    assert poly is not None and poly.get("toName") == "image"
    assert [lab.get("value") for lab in poly.findall("Label")] == ["RTS candidate"]
    choices = view.find("Choices")
    assert choices is not None and choices.get("toName") == "image"
    assert (choices.get("choice"), choices.get("required")) == ("single", "true")
    assert [c.get("value") for c in choices.findall("Choice")] == ["RTS", "not RTS", "unsure"] == list(CHOICES)


def test_tasks_json(make_review: MakeReview) -> None:
    root, header, objects = make_review()
    _, tasks_path = write_tasks(root)
    first = tasks_path.read_bytes()
    tasks = json.loads(first)
    assert len(tasks) == 25
    t, o = tasks[1], objects[1]
    d = t["data"]
    # Default: Label Studio's local-files URL, relative to LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT (the review's parent).
    assert d["image"] == f"/data/local-files/?d=review-1/chips/{o.object_id}.png"
    assert (d["object_id"], d["review_id"]) == (o.object_id, header.review_id)
    assert (d["objects_sha256"], d["package_sha256"]) == (
        header.campaign.objects_sha256,
        header.campaign.package_sha256,
    )
    assert (d["scene_id"], d["region"], d["split"], d["prob_mean"], d["prob_max"]) == (
        o.scene_id,
        o.region,
        o.split,
        o.prob_mean,
        o.prob_max,
    )
    assert (d["ground_area_m2"], d["size_bin"], d["partial"]) == (o.ground_area_m2, o.size_bin, o.partial)
    assert f"object {o.object_id}" in d["facts"]
    assert d["inventory_uids"] == o.inventory_uids == [f"inv-{o.object_id}"]
    assert f"inventory inv-{o.object_id}" in d["facts"]
    [pred] = t["predictions"]
    assert pred["score"] == o.prob_mean
    [r] = pred["result"]
    w, h = o.chip_window[2], o.chip_window[3]
    assert (r["type"], r["from_name"], r["to_name"]) == ("polygonlabels", "candidate", "image")
    assert (r["original_width"], r["original_height"]) == (w, h)
    assert r["value"]["polygonlabels"] == ["RTS candidate"]
    ring = o.chip_outline[0]
    assert len(r["value"]["points"]) == len(ring) - 1  # Label Studio closes the polygon itself
    for (px, py), (x, y) in zip(r["value"]["points"], ring, strict=False):
        assert px == pytest.approx(100 * x / w, abs=1e-4) and py == pytest.approx(100 * y / h, abs=1e-4)
    assert len({r["id"] for t in tasks for r in t["predictions"][0]["result"]}) == 25  # ids unique

    write_tasks(root)
    assert tasks_path.read_bytes() == first  # deterministic
    write_tasks(root, image_root="https://storage.googleapis.com/rts-reviews/r1")
    assert json.loads(tasks_path.read_text())[1]["data"]["image"] == (
        f"https://storage.googleapis.com/rts-reviews/r1/chips/{o.object_id}.png"
    )


def test_write_tasks_refuses_a_bad_manifest_and_writes_nothing(make_review: MakeReview) -> None:
    root, _, _ = make_review()
    (root / "manifest.jsonl").write_text('{"object_id": 2}\n')
    with pytest.raises(ReviewError, match=r"manifest.jsonl: line 1: not a review object"):
        write_tasks(root)
    assert not (root / "label-studio").exists()


def annotation(choice: str | None, *, aid: int, when: str, by: Any = 7, cancelled: bool = False) -> dict[str, Any]:
    """One annotation as Label Studio's JSON export writes it (docs: "Label Studio JSON format of annotated tasks")."""
    result: list[dict[str, Any]] = [
        {
            "id": f"poly{aid}",
            "type": "polygonlabels",
            "from_name": "candidate",
            "to_name": "image",
            "original_width": 64,
            "original_height": 64,
            "image_rotation": 0,
            "value": {"points": [[10, 10], [50, 10], [30, 40]], "closed": True, "polygonlabels": ["RTS candidate"]},
        }
    ]
    if choice is not None:
        result.append(
            {
                "id": f"ch{aid}",
                "type": "choices",
                "from_name": "verdict",
                "to_name": "image",
                "origin": "manual",
                "value": {"choices": [choice]},
            }
        )
    return {
        "id": aid,
        "completed_by": by,
        "result": result,
        "was_cancelled": cancelled,
        "ground_truth": False,
        "created_at": when,
        "updated_at": when,
        "lead_time": 3.5,
        "task": aid // 10,
    }


def export(root: Path) -> list[dict[str, Any]]:
    """A Label Studio JSON export of the review's tasks: ids added, a mix of annotations."""
    tasks = json.loads((root / "label-studio" / "tasks.json").read_text())
    for i, t in enumerate(tasks, 1):
        t.update(id=i, project=3, created_at="2026-12-01T10:00:00.000000Z", annotations=[])
    tasks[0]["annotations"] = [annotation("RTS", aid=10, when="2026-12-02T07:09:41.123456Z")]
    tasks[1]["annotations"] = [  # changed its mind: the later annotation holds, whatever the list order
        annotation("not RTS", aid=21, when="2026-12-02T08:00:00.000000Z", by={"id": 8, "email": "cd@example.org"}),
        annotation("RTS", aid=20, when="2026-12-02T07:10:00.000000Z"),
    ]
    tasks[2]["annotations"] = [  # the later one was cancelled (skipped in Label Studio)
        annotation("unsure", aid=30, when="2026-12-02T07:11:00.000000Z"),
        annotation(None, aid=31, when="2026-12-02T09:00:00.000000Z", cancelled=True),
    ]
    tasks[3]["annotations"] = [annotation(None, aid=40, when="2026-12-02T07:12:00Z")]  # outline edited, no verdict
    tasks[4]["annotations"] = [annotation("not RTS", aid=50, when="2026-12-02T07:13:00Z")]
    tasks[4]["annotations"][0]["result"].append(
        {"id": "n50", "type": "textarea", "from_name": "note", "to_name": "image", "value": {"text": ["ice wedge"]}}
    )
    tasks[5]["annotations"] = [annotation("RTS", aid=60, when="2026-12-02T07:14:00Z", cancelled=True)]
    return tasks


def test_export_read_back(make_review: MakeReview, tmp_path: Path) -> None:
    root, header, objects = make_review()
    write_tasks(root)
    path = tmp_path / "project-3-at-2026-12-02.json"
    path.write_text(json.dumps(export(root)))
    vs = read_verdicts(path)
    assert vs.format == "label-studio" and vs.source == str(path) and vs.review_id == header.review_id
    assert (vs.objects_sha256, vs.package_sha256) == (header.campaign.objects_sha256, header.campaign.package_sha256)
    got = {v.object_id: (v.verdict, v.reviewer, v.time, v.note) for v in vs.verdicts}
    ids = [o.object_id for o in objects]
    assert got == {
        ids[0]: ("rts", "7", "2026-12-02T07:09:41.123456Z", ""),
        ids[1]: ("not_rts", "cd@example.org", "2026-12-02T08:00:00.000000Z", ""),
        ids[2]: ("unsure", "7", "2026-12-02T07:11:00.000000Z", ""),
        ids[4]: ("not_rts", "7", "2026-12-02T07:13:00Z", "ice wedge"),
    }
    assert [v.object_id for v in vs.verdicts] == sorted(got)


def test_export_refusals(make_review: MakeReview, tmp_path: Path) -> None:
    root, header, objects = make_review()
    write_tasks(root)
    base = export(root)
    p = tmp_path / "export.json"

    def refused(tasks: Any, match: str) -> None:
        p.write_text(json.dumps(tasks))
        with pytest.raises(ReviewError, match=match):
            read_verdicts(p)

    other = copy.deepcopy(base)
    other[7]["data"]["review_id"] = "f" * 64
    refused(
        other,
        rf"export.json: task 8 \(object {objects[7].object_id}\): belongs to review ffffffffffff, "
        rf"but task 1 \(object {objects[0].object_id}\) to review {header.review_id[:12]}",
    )

    unknown = copy.deepcopy(base)
    unknown[6]["annotations"] = [annotation("maybe", aid=70, when="2026-12-02T07:15:00Z")]
    refused(unknown, rf"export.json: task 7 \(object {objects[6].object_id}\): choice 'maybe' is not one of")

    two = copy.deepcopy(base)
    two[0]["annotations"][0]["result"][1]["value"]["choices"] = ["RTS", "unsure"]
    refused(two, rf"task 1 \(object {objects[0].object_id}\): two verdicts in one annotation")

    dup = copy.deepcopy(base)
    dup[4]["data"]["object_id"] = dup[0]["data"]["object_id"]
    refused(dup, rf"object {objects[0].object_id} is judged twice")

    not_ours = copy.deepcopy(base)
    del not_ours[2]["data"]["review_id"]
    refused(not_ours, r"task 3: no data.review_id or data.object_id: not a task `rts review export` wrote")

    no_hash = copy.deepcopy(base)  # a task's data is the export's header: the objects and package it was made on
    del no_hash[0]["data"]["package_sha256"]
    refused(no_hash, rf"task 1 \(object {objects[0].object_id}\): no data.package_sha256 \(got None\)")

    json_min = [{"id": 1, "image": "/data/local-files/?d=r/chips/2.png", "verdict": "RTS", "annotator": 7}]
    refused(json_min, r"task 1: no 'data' object: not a Label Studio JSON export \(export with the 'JSON' format")

    refused([], r"an empty Label Studio export")
    with pytest.raises(ReviewError, match="an empty Label Studio export"):
        verdicts_from_label_studio([], p)
