"""A map-chunk run works from what map-region hands over (docs/mapping.md, "How a chunk run finds its scenes"): its
scenes' URIs and identities, no listing of the input; only its own chunk's log files, resuming from what an earlier
run of the same chunk logged since the plan; a scene changed since the plan is a ``failed`` record, never mapped
from its stale identity."""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from flows.params.mapping import MapChunkParams, MapRegionParams
from rtscore.mapping.campaign import CampaignPlan, prepare_campaign, run_campaign, scene_outputs
from rtscore.mapping.campaign_log import LOG_DIR, CampaignLog, SceneRecord
from rtscore.mapping.scenes import InputIdentity, Scene, identity_change, list_scenes, scene_now
from rtscore.storage.gcs import make_client
from tests.conftest import GCS_TEST_BUCKET
from tests.mapping.test_campaign import write_scenes
from tests.test_predict import write_package


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


def planned(package: Path, scenes_dir: Path, out: Path) -> tuple[CampaignPlan, list[MapChunkParams]]:
    """map-region's plan (chunks of 2: a b | c corrupt | nodata) and the chunk runs' parameters it hands over."""
    from flows.mapping import chunk_children

    params = MapRegionParams(package=str(package), input=str(scenes_dir), output=str(out), chunk_size=2)
    plan = prepare_campaign(params.package, params.input, params.output, params.chunk_size, drift_check=False)
    return plan, [MapChunkParams.model_validate(c.params.model_dump(mode="json")) for c in chunk_children(params, plan)]


def no_listing(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> None:
        raise AssertionError("a chunk run with its scenes handed over listed the input")

    import flows.mapping
    import rtscore.mapping.campaign

    for module in (flows.mapping, rtscore.mapping.campaign):
        monkeypatch.setattr(module, "list_scenes", refuse)


def only_chunk_logs_read(monkeypatch: pytest.MonkeyPatch, chunk: int) -> list[str]:
    """Every log file read from now on is recorded; reading another chunk's fails the test."""
    read: list[str] = []
    original = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        if self.parent.name == LOG_DIR:
            read.append(self.name)
            assert self.name.startswith(f"chunk-{chunk:05d}-"), f"chunk {chunk}'s run read {self.name}"
        return original(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    return read


def test_a_chunk_run_maps_its_handed_scenes_from_its_own_chunks_log_only(
    monkeypatch: pytest.MonkeyPatch, package: Path, tmp_path: Path
) -> None:
    from flows.mapping import map_chunk

    out = tmp_path / "campaign"
    plan, sent = planned(package, write_scenes(tmp_path / "in"), out)
    assert [(p.chunk, p.scene_ids, [s.scene_id for s in p.scenes]) for p in sent] == [
        (0, ["a", "b"], ["a", "b"]),
        (1, ["c", "corrupt"], ["c", "corrupt"]),
        (2, ["nodata"], ["nodata"]),
    ]
    by_id = {s.scene_id: s for s in plan.scenes}
    assert [s.uri for s in sent[0].scenes] == [by_id["a"].uri, by_id["b"].uri]
    assert sent[0].scenes[0].identity.model_dump() == by_id["a"].identity.model_dump()

    # A predecessor of chunk 0 (a crashed run) logged `a`; chunk 1's file claims `b` done (a decoy: read, it would
    # hide `b`) and chunk 2's is not readable at all.
    assert map_chunk.fn(sent[0].model_copy(update={"scene_ids": ["a"]})) == {"done": 1}
    log = CampaignLog(out)
    decoy = SceneRecord.now(by_id["b"], plan.identity, "done")
    log.writer(1, "decoy").append(decoy)
    (out / LOG_DIR / "chunk-00002-garbage.jsonl").write_bytes(b"\xff\x00 not a log")

    no_listing(monkeypatch)
    read = only_chunk_logs_read(monkeypatch, 0)
    assert map_chunk.fn(sent[0]) == {"done": 1}  # b mapped, a skipped: what its predecessor logged
    assert read and all(name.startswith("chunk-00000-") for name in read)
    monkeypatch.undo()
    assert sorted((r.scene_id, r.status) for r in log.read(0)) == [("a", "done"), ("b", "done")]
    assert map_chunk.fn(sent[0]) == {}  # idempotent: run again, it appends nothing


def test_a_chunk_resumes_only_from_its_own_records_newer_than_the_plan(package: Path, tmp_path: Path) -> None:
    """A `done` of this identity in the chunk's own file, older than a record of another identity that replaced the
    scene's outputs (written by another chunk index of an earlier campaign run), does not make the chunk skip it."""
    from flows.mapping import map_chunk

    out, scenes_dir = tmp_path / "campaign", write_scenes(tmp_path / "in")
    plan, _ = planned(package, scenes_dir, out)
    a = next(s for s in plan.scenes if s.scene_id == "a")
    ours = SceneRecord.now(a, plan.identity, "done")
    theirs = ours.model_copy(update={"package_sha256": "f" * 64, "time": ours.time + timedelta(seconds=1)})
    log = CampaignLog(out)
    log.writer(0, "earlier").append(ours)
    log.writer(7, "other").append(theirs)  # another chunking: the scene was in chunk 7 then

    plan, sent = planned(package, scenes_dir, out)
    assert sent[0].scene_ids == ["a", "b"] and sent[0].scenes[0].logged == theirs.time
    assert map_chunk.fn(sent[0]) == {"done": 2}


def test_a_scene_changed_since_the_plan_is_failed_naming_the_change_not_mapped(package: Path, tmp_path: Path) -> None:
    from flows.mapping import map_chunk

    out, scenes_dir = tmp_path / "campaign", write_scenes(tmp_path / "in")
    _, sent = planned(package, scenes_dir, out)
    shutil.copyfile(scenes_dir / "c.tif", scenes_dir / "b.tif")  # b rewritten after planning
    assert map_chunk.fn(sent[0]) == {"done": 1, "failed": 1}
    (b,) = [r for r in CampaignLog(out).read() if r.scene_id == "b"]
    assert b.status == "failed" and b.reason is not None
    assert "changed since the campaign was planned" in b.reason and f"{scenes_dir / 'b.tif'} changed" in b.reason
    assert not scene_outputs(out, next(s for s in list_scenes(scenes_dir) if s.scene_id == "b")).prob.exists()
    # the next campaign run lists b anew and maps its new content
    run_campaign(package, scenes_dir, out, chunk_size=2, drift_check=False)
    latest_b = [r for r in CampaignLog(out).read() if r.scene_id == "b"][-1]
    assert latest_b.status == "done" and latest_b.input.sha256 != b.input.sha256


def test_a_gs_scenes_identity_is_checked_by_its_generation_and_its_extra_objects(gcs_emulator: str) -> None:
    root = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    bucket = make_client().bucket(GCS_TEST_BUCKET)
    prefix = root.removeprefix(f"gs://{GCS_TEST_BUCKET}/")
    bucket.blob(f"{prefix}/in/t1.tif").upload_from_string(b"scene")
    bucket.blob(f"{prefix}/in/t1_extra.tif").upload_from_string(b"extra")
    (listed,) = [s for s in list_scenes(f"{root}/in", extra=True) if s.scene_id == "t1"]
    assert scene_now(listed, extra=True) == listed and identity_change(listed, scene_now(listed, extra=True)) is None

    bucket.blob(f"{prefix}/in/t1_extra.tif").upload_from_string(b"extra, rewritten")
    why = identity_change(listed, scene_now(listed, extra=True))
    assert why is not None and why.startswith(f"EXTRA raster {root}/in/t1_extra.tif changed: ") and "generation" in why
    bucket.blob(f"{prefix}/in/t1.tif").upload_from_string(b"scene, rewritten")
    why = identity_change(listed, scene_now(listed, extra=True))
    assert why is not None and why.startswith(f"scene raster {root}/in/t1.tif changed: generation ")
    bucket.blob(f"{prefix}/in/t1.tif").delete()
    assert identity_change(listed, scene_now(listed, extra=True)) == f"{root}/in/t1.tif no longer exists"


def test_the_log_of_one_chunk_is_read_by_its_name_prefix_local_and_gs(gcs_emulator: str, tmp_path: Path) -> None:
    scene = Scene("a", "/x/a.tif", InputIdentity(sha256="0" * 64, size=1))
    for root in (str(tmp_path / "out"), f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/out"):
        log = CampaignLog(root)
        ident = _identity()
        for chunk, run in ((1, "r1"), (1, "r2"), (10, "r1"), (10000, "r1"), (100000, "r1")):
            log.writer(chunk, run).append(SceneRecord.now(scene, ident, "done"))
        names = [uri.rsplit("/", 1)[-1] for uri, _ in log.files(1)]
        assert names == ["chunk-00001-r1.jsonl", "chunk-00001-r2.jsonl"], root
        assert [uri.rsplit("/", 1)[-1] for uri, _ in log.files(10000)] == ["chunk-10000-r1.jsonl"], root
        assert len(log.read(1)) == 2 and len(log.read(100000)) == 1 and len(log.read()) == 5, root


def _identity() -> Any:
    from rtscore.mapping.campaign_log import MapIdentity, MapSettings

    return MapIdentity(package_sha256="p" * 64, code_sha256="c" * 64, settings=MapSettings(stride=64, batch_size=8))
