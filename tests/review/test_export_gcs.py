"""A review exported into a bucket (the real google-cloud-storage client against the GCS emulator): every file of
the review directory lands with the content type a browser needs to open the page from the bucket."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.review_export_bench import write_campaign
from rtscore.mapping.campaign import run_campaign
from rtscore.mapping.outputs import STAGING_DIR
from rtscore.review import run
from rtscore.review.manifest import (
    HEADER_FILE,
    MANIFEST_FILE,
    PAGE_DATA_FILE,
    PAGE_FILE,
    ChipSettings,
    Selection,
    iter_objects,
)
from rtscore.storage.gcs import GcsStore, RetryPolicy, make_client
from tests.conftest import GCS_TEST_BUCKET
from tests.mapping.test_campaign import write_scenes
from tests.test_predict import write_package


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


def test_a_campaign_of_gs_scenes_exports_the_chips_of_the_local_one(
    gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scenes in a bucket, the campaign in a bucket: each chip is read from its scene downloaded at the generation the
    campaign mapped, and its bytes are those of the same campaign mapped from local files."""
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    package = write_package(tmp_path / "package")
    scenes = write_scenes(tmp_path / "in")
    run_campaign(package, scenes, tmp_path / "local", chunk_size=2)
    gs = f"gs://{GCS_TEST_BUCKET}/campaign-gs"
    client = make_client().bucket(GCS_TEST_BUCKET)
    for f in sorted(scenes.iterdir()):
        client.blob(f"campaign-gs/in/{f.name}").upload_from_filename(str(f))
    summary = run_campaign(package, f"{gs}/in", f"{gs}/out", chunk_size=2)
    assert summary.objects > 0, "the test campaign must find objects"
    local = run.export(str(tmp_path / "local"), str(package), str(tmp_path / "r-local"), Selection(), ChipSettings())
    remote = run.export(f"{gs}/out", str(package), f"{gs}/review", Selection(), ChipSettings())
    assert remote.n_objects == local.n_objects == summary.objects
    store = GcsStore(GCS_TEST_BUCKET, "campaign-gs/review", RetryPolicy.from_env())
    for o in iter_objects(tmp_path / "r-local" / MANIFEST_FILE):
        blob = store.get(o.chip)
        assert blob is not None and blob.download_as_bytes() == (tmp_path / "r-local" / o.chip).read_bytes(), o.chip
    staging = tmp_path / "cache" / STAGING_DIR
    assert not staging.exists() or not list(staging.iterdir()), "no staged scene outlives the export"
