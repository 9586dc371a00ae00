"""The tile records of an `rts tile` run (TileRecord): each file holds what its status has, as written before the
records were typed (issue 34); a record whose files are not all there, or that does not read, is not done."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rtscore.data.tiling.state import TileRecord, complete_record, iter_records, record_path, write_record

ROW = {"Tile_id": "t3", "centroid_lat": "68.1", "centroid_lon": "-133.5", "TrainClass": "negative"}
DOCS: list[dict[str, Any]] = [
    {"tile_id": "t1", "status": "empty", "files": {}},
    {"tile_id": "t2", "status": "sparse", "files": {}, "valid_fraction": 0.125},
    {"tile_id": "t3", "status": "written", "files": {"rgb/t3.tif": 4, "labels/t3.tif": 2}, "row": ROW, "uids": []},
]


def test_a_record_file_holds_the_fields_of_its_status_in_their_order(tmp_path: Path) -> None:
    for doc in DOCS:
        write_record(tmp_path, TileRecord.model_validate(doc))
        assert record_path(tmp_path, doc["tile_id"]).read_text() == json.dumps(doc, indent=2) + "\n"
    assert [r.model_dump(exclude_none=True) for r in iter_records(tmp_path)] == DOCS


def test_a_record_is_complete_only_with_its_files_at_their_sizes(tmp_path: Path) -> None:
    for doc in DOCS:
        write_record(tmp_path, TileRecord.model_validate(doc))
    assert complete_record(tmp_path, "t1") == TileRecord.model_validate(DOCS[0])
    assert complete_record(tmp_path, "t3") is None  # its files are not there
    (tmp_path / "rgb").mkdir()
    (tmp_path / "labels").mkdir()
    (tmp_path / "rgb/t3.tif").write_bytes(b"1234")
    (tmp_path / "labels/t3.tif").write_bytes(b"12")
    record = complete_record(tmp_path, "t3")
    assert record is not None and record.metadata_row == ROW and record.labelled == []
    record_path(tmp_path, "t3").write_text(json.dumps({**DOCS[2], "row": None}))  # a written tile without its row
    assert complete_record(tmp_path, "t3") is None
