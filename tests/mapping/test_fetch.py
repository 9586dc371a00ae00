"""The finish's parts files fetched concurrently (gs:// on the storage emulator, and local): the parts of the
sequential read in the done scenes' order; downloads only of what is new or changed; errors naming the scene."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest

from rtscore.mapping.campaign import OBJECTS_FILE, write_campaign_outputs
from rtscore.mapping.campaign_log import MapIdentity, MapSettings, SceneRecord
from rtscore.mapping.fetch import fetch_scene_parts
from rtscore.mapping.outputs import CampaignRoot, read_scene_parts, scene_outputs
from rtscore.mapping.polygons import LazyParts, PolygonsError, SceneParts, parts_json, write_parts
from rtscore.mapping.scenes import CampaignError, InputIdentity, Scene
from rtscore.storage.gcs import GcsStore
from tests.conftest import GCS_TEST_BUCKET
from tests.mapping.test_campaign_gcs import objects_of  # imports Prefect (its logging set up) at collection
from tests.mapping.test_merge import grid_scene


def scene(scene_id: str) -> Scene:
    return Scene(scene_id, f"/in/{scene_id}.tif", InputIdentity(sha256="0" * 64, size=1))


def publish_parts(root: CampaignRoot, sp: SceneParts, ground: float = 4.0) -> Scene:
    """A done scene's parts file written and published as a chunk run leaves it."""
    s = scene(sp.scene_id)
    path = write_parts(scene_outputs(root, s).parts, sp, ground)
    root.publish([path])
    return s


@pytest.fixture(scope="module")
def parts() -> list[SceneParts]:
    return [grid_scene(0, c, c + 1) for c in range(6)]


@pytest.fixture
def downloads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    seen: list[str] = []
    real = GcsStore.download_file

    def counted(self: GcsStore, blob: object, rel: str, path: Path) -> None:
        seen.append(rel)
        real(self, blob, rel, path)  # type: ignore[arg-type]

    monkeypatch.setattr(GcsStore, "download_file", counted)
    return seen


def texts(fetched: list) -> list[str]:
    return [parts_json(f.parts, f.pixel_m2) for f in fetched]


def test_concurrent_fetch_downloads_only_what_is_new_or_changed(
    gcs_emulator: str, parts: list[SceneParts], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, downloads: list[str]
) -> None:
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "writer"))
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    writer = CampaignRoot(uri)
    done = [publish_parts(writer, sp) for sp in parts[:5]]
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "finisher"))  # another machine: an empty mirror
    out = CampaignRoot(uri)
    got = fetch_scene_parts(out, done, workers=4)
    assert [f.scene.scene_id for f in got] == [s.scene_id for s in done]  # the done scenes' order
    assert sorted(downloads) == sorted(out.rel(scene_outputs(out, s).parts) for s in done)
    sequential = [read_scene_parts(CampaignRoot(uri, cache_dir=tmp_path / "seq"), s) for s in done]
    assert texts(got) == [parts_json(sp, m2) for sp, m2 in sequential]
    assert all(f.downloaded for f in got)

    downloads.clear()  # a second finish with nothing new downloads nothing
    again = fetch_scene_parts(CampaignRoot(uri), done, workers=4)
    assert downloads == [] and texts(again) == texts(got) and not any(f.downloaded for f in again)

    done.append(publish_parts(writer, parts[5]))  # one new scene: one download
    downloads.clear()
    more = fetch_scene_parts(CampaignRoot(uri), done, workers=4)
    assert downloads == [writer.rel(scene_outputs(writer, done[-1]).parts)] and texts(more)[:5] == texts(got)

    remapped = grid_scene(0, 2, 99)  # scene 2 re-mapped: its file changed under the same id
    changed = SceneParts(done[2].scene_id, remapped.crs, remapped.pixel_size, remapped.footprint, remapped.parts)
    publish_parts(writer, changed, ground=5.0)
    downloads.clear()
    last = fetch_scene_parts(CampaignRoot(uri), done, workers=4)
    assert downloads == [writer.rel(scene_outputs(writer, done[2]).parts)]
    assert last[2].sha256 != more[2].sha256 and last[2].pixel_m2 == 5.0
    assert [f.sha256 for i, f in enumerate(last) if i != 2] == [f.sha256 for i, f in enumerate(more) if i != 2]


def test_a_missing_parts_file_fails_naming_the_scene_and_the_object(
    gcs_emulator: str, parts: list[SceneParts], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    out = CampaignRoot(uri)
    done = [publish_parts(out, sp) for sp in parts[:2]] + [scene("lost"), scene("gone")]
    with pytest.raises(CampaignError) as err:
        fetch_scene_parts(out, done, workers=2)
    text = str(err.value)
    assert "scene lost:" in text and f"{uri}/scenes/lost/lost_parts.json" in text and "1 more scene" in text


def test_local_parts_files_are_read_in_place(parts: list[SceneParts], tmp_path: Path) -> None:
    out = CampaignRoot(tmp_path / "campaign")
    done = [publish_parts(out, sp) for sp in parts[:3]]
    got = fetch_scene_parts(out, done, workers=3)
    assert texts(got) == [parts_json(sp, 4.0) for sp in parts[:3]]
    assert not any(f.downloaded for f in got)
    bad = scene_outputs(out, done[1]).parts
    bad.write_text("{}")
    with pytest.raises(CampaignError, match=rf"scene {done[1].scene_id}: .*{bad}.*not a readable parts file"):
        fetch_scene_parts(out, done, workers=3)


def test_parts_are_read_when_first_used_from_the_bytes_fetched(parts: list[SceneParts], tmp_path: Path) -> None:
    out = CampaignRoot(tmp_path / "campaign")
    done = [publish_parts(out, sp) for sp in parts[:2]]
    got = fetch_scene_parts(out, done, workers=2)
    assert isinstance(got[0].parts.parts, LazyParts) and got[0].parts.parts._parts is None  # header only
    assert texts(got[:1]) == [parts_json(parts[0], 4.0)]  # read now: the same parts
    path = scene_outputs(out, done[1]).parts
    write_parts(path, parts[3], 4.0)  # rewritten after the fetch took its sha256
    with pytest.raises(PolygonsError, match=rf"{path}: changed while the campaign was finished"):
        len(got[1].parts.parts)


def test_finishes_of_a_growing_gs_campaign_download_the_new_files_and_write_the_full_merges_layer(
    gcs_emulator: str,
    parts: list[SceneParts],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    downloads: list[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """write_campaign_outputs after scenes arrive in two runs (the scenes' ids out of order): the second finish
    downloads only the new scenes' files, a finish with nothing new none, and each objects layer equals the one of a
    finish from an empty cache (full download, full merge)."""
    identity = MapIdentity(package_sha256="a" * 64, code_sha256="c" * 64, settings=MapSettings(stride=32, batch_size=8))
    uri = f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"
    root = CampaignRoot(uri, cache_dir=tmp_path / "workers")  # the chunk runs' mirror, not the finish's
    log = root.log().writer(0)
    scenes: list[Scene] = []

    def arrive(batch: list[SceneParts]) -> None:
        for sp in batch:
            s = publish_parts(root, sp)
            log.append(SceneRecord.now(s, identity, "done", valid_pixels=100))
            scenes.append(s)
        scenes.sort(key=lambda s: s.scene_id)  # the campaign lists its scenes by id

    def finish(cache: str) -> list[tuple[object, ...]]:
        monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / cache))
        got = write_campaign_outputs(scenes, root.log(), CampaignRoot(uri), identity, min_object_area_m2=0.0)
        assert got.done == len(scenes)
        return objects_of(CampaignRoot(uri).path(OBJECTS_FILE))

    arrive([parts[4], parts[1], parts[2]])
    first = finish("cache")
    assert len(downloads) == 3
    arrive([parts[0], parts[5], parts[3]])
    downloads.clear()
    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)  # `rts` may have stopped it
    caplog.set_level(logging.INFO, logger="rtscore")
    second = finish("cache")
    assert any("incremental merge: 3 scene(s) added, 0 removed" in r.getMessage() for r in caplog.records)
    assert sorted(downloads) == sorted(
        root.rel(scene_outputs(root, scene(sp.scene_id)).parts) for sp in (parts[0], parts[5], parts[3])
    )
    assert len(second) > len(first)
    downloads.clear()
    fresh = finish(f"fresh-{uuid.uuid4().hex[:6]}")  # another machine: every file downloaded, a full merge
    assert len(downloads) == 6 and fresh == second
    downloads.clear()
    again = finish("cache")
    assert downloads == [] and again == second


def test_a_finish_takes_the_header_of_a_file_it_read_before_unchanged_from_its_cache(
    parts: list[SceneParts], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A campaign of 10^5 quads would read every parts file at every finish for its header: unchanged files (same
    size, times and inode) are taken from the header cache, their parts still checked when read."""
    from rtscore.mapping import fetch

    out = CampaignRoot(tmp_path / "campaign")
    done = [publish_parts(out, sp) for sp in parts[:4]]
    first = fetch_scene_parts(out, done, workers=2)
    reads: list[Path] = []
    real = fetch._read

    def counted(path: Path) -> bytes:
        reads.append(path)
        return real(path)

    monkeypatch.setattr(fetch, "_read", counted)
    again = fetch_scene_parts(out, done, workers=2)
    assert reads == [] and [f.sha256 for f in again] == [f.sha256 for f in first]
    assert texts(again) == texts(first)  # the parts, read now, are the file's
    changed = scene_outputs(out, done[2]).parts
    write_parts(changed, parts[5], 4.0)  # re-mapped: another file under the same path
    third = fetch_scene_parts(out, done, workers=2)
    assert reads == [changed] and texts(third)[2] == parts_json(parts[5], 4.0)
    (out.local / fetch.FINISH_DIR / fetch.HEADERS).write_text("{torn")
    reads.clear()
    assert texts(fetch_scene_parts(out, done, workers=2)) == texts(third) and len(reads) == 4  # a bad cache: all read
