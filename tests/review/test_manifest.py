"""rtscore.review.manifest: a manifest written before a field was added still reads."""

from __future__ import annotations

import json
from pathlib import Path

from rtscore.review.manifest import iter_objects, object_facts, object_line
from tests.review.conftest import write_review


def test_a_manifest_without_inventory_uids_reads_and_one_with_them_round_trips(tmp_path: Path) -> None:
    _, objects = write_review(tmp_path / "r", n=2)
    old = json.loads(object_line(objects[0]))
    del old["inventory_uids"]  # a line written before the field existed
    new = objects[1].model_copy(update={"inventory_uids": ["3f1c2d9e-0b5a-5c7e-9d2f-1a2b3c4d5e6f"]})
    (tmp_path / "m.jsonl").write_text(json.dumps(old) + "\n" + object_line(new) + "\n")
    a, b = iter_objects(tmp_path / "m.jsonl")
    assert a.inventory_uids is None and a == objects[0].model_copy(update={"inventory_uids": None})
    assert b == new and object_facts(b)["inventory_uids"] == new.inventory_uids
