"""A review exported into a bucket (the real google-cloud-storage client against the GCS emulator): every file of
the review directory lands with the content type a browser needs to open the page from the bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.review_export_bench import write_campaign
from rtscore.review import run
from rtscore.review.manifest import HEADER_FILE, MANIFEST_FILE, PAGE_DATA_FILE, PAGE_FILE, ChipSettings, Selection
from rtscore.storage.gcs import GcsStore, RetryPolicy
from tests.conftest import GCS_TEST_BUCKET


def test_a_review_exported_to_gs_opens_from_the_bucket(
    gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    campaign, package = write_campaign(tmp_path / "campaign", 6, 1, 256)
    uri = f"gs://{GCS_TEST_BUCKET}/reviews/r1"
    header = run.export(str(campaign), str(package), uri, Selection(), ChipSettings())
    store = GcsStore(GCS_TEST_BUCKET, "reviews/r1", RetryPolicy.from_env())
    want = {
        PAGE_FILE: "text/html",
        PAGE_DATA_FILE: "text/javascript",
        "chips/1.png": "image/png",
        "chips/1.svg": "image/svg+xml",
        HEADER_FILE: "application/json",
        "label-studio/tasks.json": "application/json",
    }
    for rel, content_type in want.items():
        blob = store.get(rel)
        assert blob is not None, rel
        assert blob.content_type == content_type, (rel, blob.content_type)
    assert store.get(MANIFEST_FILE) is not None and header.n_objects == 6
    assert store.get(".export-work.jsonl") is None  # the resume file stays on the exporting machine
