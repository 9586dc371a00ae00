"""Flows on a gs:// run directory (GCS emulator): a fresh worker reuses the cached stages, and the UI
gets Cloud Console links and inline images."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import GCS_TEST_BUCKET
from tests.flows.configs import write_config
from tests.helpers import tiny_pipeline_config


@pytest.mark.slow
def test_a_fresh_worker_reuses_the_cached_stages_of_a_gs_run(
    prefect_harness: None, gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.data import data_pipeline
    from flows.params import DataParams
    from rtscore.storage import CACHE_ENV, RunDir

    monkeypatch.setenv("RTS_GCS_WORKERS", "4")  # the emulator serves one request at a time
    monkeypatch.setenv("RTS_GCS_RETRY_INITIAL_S", "0.01")
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"
    params = DataParams(config=str(write_config(tmp_path / "p.yaml", tiny_pipeline_config())), run_dir=uri)

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "worker-a"))
    refs = data_pipeline(params)
    assert refs.datasets["train"].uri == f"{uri}/datasets/train.zarr"
    before = {k: e.created for k, e in RunDir(uri).read_manifest().artifacts.items()}

    time.sleep(1.1)  # `created` has a resolution of one second
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "worker-b"))  # another machine: an empty local mirror
    again = data_pipeline(params)
    after = {k: e.created for k, e in RunDir(uri).read_manifest().artifacts.items()}
    assert {k: v for k, v in after.items() if k != "config.resolved.yaml"} == {
        k: v for k, v in before.items() if k != "config.resolved.yaml"
    }, "every stage was served from the cache: its artifacts are in the bucket"
    assert again.validation == refs.validation
    assert (
        not (tmp_path / "worker-b" / "gcs" / GCS_TEST_BUCKET)
        .joinpath(uri[len("gs://rts-test/") :], "datasets")
        .exists()
    )

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey, ArtifactFilterType
    from prefect.client.schemas.sorting import ArtifactSort

    async def latest() -> tuple[str, list[str]]:
        async with get_client() as client:
            (summary,) = await client.read_artifacts(
                artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["data-pipeline"])),
                sort=ArtifactSort.CREATED_DESC,
                limit=1,
            )
            images = await client.read_artifacts(
                artifact_filter=ArtifactFilter(type=ArtifactFilterType(any_=["image"])), sort=ArtifactSort.CREATED_DESC
            )
            return str(summary.data), [str(a.data) for a in images]

    summary, images = asyncio.run(latest())
    assert "not shown" not in summary, "the summary staged the validation report from the bucket"
    assert "console.cloud.google.com/storage/browser" not in summary  # links are artifacts of their own
    bucket_path = uri.removeprefix("gs://")
    assert f"https://storage.cloud.google.com/{bucket_path}/validation/samples.png" in images
