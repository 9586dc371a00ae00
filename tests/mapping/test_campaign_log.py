"""The campaign's scene list (directory, CSV, gs:// prefix) and its manifest-log (append, read, plan, summary)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import multiprocessing
import pickle
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rtscore.mapping.campaign_log import (
    OLDER_RECORD,
    CampaignLog,
    MapIdentity,
    MapSettings,
    SceneRecord,
    other_identity,
    plan,
    summarize,
)
from rtscore.mapping.scenes import (
    CampaignError,
    CompanionInput,
    InputIdentity,
    Scene,
    chunk_scenes,
    list_scenes,
    read_scene_dates,
)
from rtscore.storage.gcs import RetryPolicy, make_client
from tests.conftest import GCS_TEST_BUCKET

FAST = RetryPolicy(deadline_s=5.0, initial_s=0.001, max_s=0.005, conflict_attempts=10)
SETTINGS = MapSettings(stride=32, batch_size=8)
PKG_A = MapIdentity(package_sha256="a" * 64, code_sha256="c" * 64, settings=SETTINGS)
PKG_B = MapIdentity(package_sha256="b" * 64, code_sha256="c" * 64, settings=SETTINGS)


def write_scene(path: Path, content: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content or path.name.encode())
    return path


def scene(scene_id: str, sha: str = "0" * 64) -> Scene:
    return Scene(scene_id, f"/data/{scene_id}.tif", InputIdentity(sha256=sha, size=10))


def record(s: Scene, status: str = "done", package: MapIdentity = PKG_A, *, at: int = 0, **kw: object) -> SceneRecord:
    """A record of ``s`` made ``at`` seconds after a fixed time (explicit times: the order is what is tested)."""
    r = SceneRecord.now(s, package, status, **kw)  # type: ignore[arg-type]
    return r.model_copy(update={"time": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=at)})


@pytest.fixture
def gs_root(gcs_emulator: str) -> str:
    return f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"


def upload(uri: str, data: bytes) -> None:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    make_client().bucket(bucket).blob(name).upload_from_string(data)


# --------------------------------------------------------------------------------------------- scene lists
def test_a_directory_lists_its_geotiffs_by_id_with_their_sha256(tmp_path: Path) -> None:
    b = write_scene(tmp_path / "in" / "sub" / "b_scene.TIFF", b"bbb")
    a = write_scene(tmp_path / "in" / "a_scene.tif", b"aaa")
    write_scene(tmp_path / "in" / "notes.txt")
    write_scene(tmp_path / "in" / ".hidden" / "c.tif")
    scenes = list_scenes(tmp_path / "in")
    assert [s.scene_id for s in scenes] == ["a_scene", "b_scene"]
    assert [s.uri for s in scenes] == [str(a), str(b)]
    assert scenes[0].identity == InputIdentity(sha256=hashlib.sha256(b"aaa").hexdigest(), size=3)


def test_a_data_root_lists_the_scenes_of_its_planet_rgb_folder(tmp_path: Path) -> None:
    """A tile-layout data root as rts predict reads one: its PLANET-RGB scenes, not its EXTRA rasters or labels (which
    share the scenes' names)."""
    for folder in ("PLANET-RGB", "EXTRA", "labels"):
        write_scene(tmp_path / "root" / folder / "t1.tif", folder.encode())
    scenes = list_scenes(tmp_path / "root")
    assert [(s.scene_id, s.uri) for s in scenes] == [("t1", str(tmp_path / "root" / "PLANET-RGB" / "t1.tif"))]


def test_a_scene_list_csv_resolves_relative_paths_against_its_folder(tmp_path: Path) -> None:
    write_scene(tmp_path / "lists" / "tiles" / "x.tif", b"x")
    other = write_scene(tmp_path / "elsewhere" / "y.tif", b"y")
    csv = tmp_path / "lists" / "scenes.csv"
    csv.write_text(f"path,scene_id,date\ntiles/x.tif,,2021-07-14\n{other},yukon-7,\n")
    scenes = list_scenes(csv)
    assert [(s.scene_id, s.uri) for s in scenes] == [
        ("x", str(tmp_path / "lists" / "tiles" / "x.tif")),
        ("yukon-7", str(other)),
    ]
    assert scenes[0].identity.sha256 == hashlib.sha256(b"x").hexdigest()
    # The optional date column (rts arts export's base-map dates), by scene id; an empty cell: no date.
    assert read_scene_dates(str(csv)) == {"x": dt.date(2021, 7, 14)}
    csv.write_text("path,date\ntiles/x.tif,14.07.2021\n")
    with pytest.raises(CampaignError, match=r"scenes.csv, row 2, column 'date': '14.07.2021' is not a date"):
        read_scene_dates(str(csv))


def test_a_gs_prefix_lists_its_objects_with_generation_and_size(gs_root: str) -> None:
    upload(f"{gs_root}/in/s2.tif", b"22")
    upload(f"{gs_root}/in/deep/s1.tif", b"1")
    upload(f"{gs_root}/in/readme.md", b"no")
    upload(f"{gs_root}/input-not-this/s3.tif", b"3")  # shares the prefix's leading characters only
    scenes = list_scenes(f"{gs_root}/in")
    assert [(s.scene_id, s.uri) for s in scenes] == [
        ("s1", f"{gs_root}/in/deep/s1.tif"),
        ("s2", f"{gs_root}/in/s2.tif"),
    ]
    ident = scenes[1].identity
    assert ident.sha256 is None and ident.generation and ident.generation > 0 and ident.size == 2
    upload(f"{gs_root}/in/s2.tif", b"22")  # rewritten: a new generation, so a new identity
    assert list_scenes(f"{gs_root}/in")[1].identity != ident


def sha(data: bytes) -> InputIdentity:
    return InputIdentity(sha256=hashlib.sha256(data).hexdigest(), size=len(data))


def test_a_local_scenes_identity_covers_the_extra_raster_mapping_reads_with_it(tmp_path: Path) -> None:
    """Listed for a package that reads EXTRA bands, a scene's identity holds its EXTRA raster where rts predict looks
    for it: the sibling <stem>_extra.tif, EXTRA/<name> of a data root; one that is absent is named, without content."""
    loose = tmp_path / "loose"
    write_scene(loose / "a.tif", b"rgb-a")
    write_scene(loose / "a_extra.tif", b"extra-a")
    write_scene(loose / "b.tif", b"rgb-b")  # no EXTRA raster
    by_id = {s.scene_id: s for s in list_scenes(loose, extra=True)}
    assert by_id["a"].companions == (
        CompanionInput(role="extra", uri=str(loose / "a_extra.tif"), identity=sha(b"extra-a")),
    )
    assert by_id["b"].extra == CompanionInput(role="extra", uri=str(loose / "b_extra.tif"), identity=None)
    assert all(s.companions == () for s in list_scenes(loose))  # a package without EXTRA bands reads none
    root = tmp_path / "root"
    write_scene(root / "PLANET-RGB" / "t1.tif", b"rgb")
    write_scene(root / "EXTRA" / "t1.tif", b"dem")
    (t1,) = list_scenes(root, extra=True)
    assert t1.extra == CompanionInput(role="extra", uri=str(root / "EXTRA" / "t1.tif"), identity=sha(b"dem"))
    csv = tmp_path / "scenes.csv"
    csv.write_text(f"path\n{loose / 'a.tif'}\n")
    assert list_scenes(csv, extra=True)[0].companions == by_id["a"].companions


def test_a_gs_scenes_identity_covers_its_extra_object_inside_or_outside_the_listed_prefix(gs_root: str) -> None:
    upload(f"{gs_root}/root/PLANET-RGB/t1.tif", b"rgb")
    upload(f"{gs_root}/root/EXTRA/t1.tif", b"dem")  # beside the listed prefix, not under it
    upload(f"{gs_root}/loose/s.tif", b"rgb")
    upload(f"{gs_root}/loose/s_extra.tif", b"ndvi")
    (t1,) = list_scenes(f"{gs_root}/root/PLANET-RGB", extra=True)
    assert t1.extra is not None and t1.extra.uri == f"{gs_root}/root/EXTRA/t1.tif"
    assert t1.extra.identity is not None and t1.extra.identity.generation and t1.extra.identity.size == 3
    by_id = {s.scene_id: s for s in list_scenes(f"{gs_root}/loose", extra=True)}
    s = by_id["s"]
    assert s.extra is not None and s.extra.uri == f"{gs_root}/loose/s_extra.tif" and s.extra.identity is not None
    upload(f"{gs_root}/root/EXTRA/t1.tif", b"dem")  # rewritten: a new generation, the scene's identity changes
    (again,) = list_scenes(f"{gs_root}/root/PLANET-RGB", extra=True)
    assert again.identity == t1.identity and again.extra != t1.extra
    upload(f"{gs_root}/scenes.csv", b"uri\nroot/PLANET-RGB/t1.tif\n")
    assert list_scenes(f"{gs_root}/scenes.csv", extra=True)[0].extra == again.extra


def test_a_gs_scene_list_csv_resolves_relative_uris(gs_root: str) -> None:
    upload(f"{gs_root}/tiles/z.tif", b"z")
    upload(f"{gs_root}/scenes.csv", b"uri\ntiles/z.tif\n")
    (only,) = list_scenes(f"{gs_root}/scenes.csv")
    assert (only.scene_id, only.uri, only.identity.size) == ("z", f"{gs_root}/tiles/z.tif", 1)


def test_duplicate_scene_ids_are_refused_naming_both_files(tmp_path: Path) -> None:
    one = write_scene(tmp_path / "in" / "2019" / "scene.tif")
    two = write_scene(tmp_path / "in" / "2020" / "scene.tif")
    with pytest.raises(CampaignError, match="'scene'") as err:
        list_scenes(tmp_path / "in")
    assert str(one) in str(err.value) and str(two) in str(err.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("path\nok.tif\n\n,\n", r"scenes.csv, row 4, column 'path'.*empty"),
        ("path\nok.tif\nmissing.tif\n", r"scenes.csv, row 3, column 'path'.*missing.tif is not a file"),
        ("path,scene_id\nok.tif,bad id\n", r"scenes.csv, row 2, column 'scene_id'.*'bad id'"),
        ("file,name\nok.tif,a\n", r"scenes.csv: expected exactly one of the columns path / uri.*\['file', 'name'\]"),
    ],
)
def test_a_bad_scene_list_names_the_file_row_and_column(tmp_path: Path, text: str, expected: str) -> None:
    write_scene(tmp_path / "ok.tif")
    (tmp_path / "scenes.csv").write_text(text)
    with pytest.raises(CampaignError, match=expected):
        list_scenes(tmp_path / "scenes.csv")


def test_chunks_are_sorted_by_id_whatever_the_listing_order() -> None:
    scenes = [scene(n) for n in ("d", "a", "c", "e", "b")]
    chunks = chunk_scenes(scenes, 2)
    assert [[s.scene_id for s in c] for c in chunks] == [["a", "b"], ["c", "d"], ["e"]]
    assert chunk_scenes(list(reversed(scenes)), 2) == chunks
    with pytest.raises(CampaignError, match="chunk size"):
        chunk_scenes(scenes, 0)


# --------------------------------------------------------------------------------------------- the log
@pytest.mark.parametrize("where", ["local", "gs"])
def test_records_append_and_read_back_from_one_file_per_chunk_run(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "out") if where == "local" else request.getfixturevalue("gs_root")
    log = CampaignLog(root, retry=FAST)
    monkeypatch.setenv("RTS_FLOW_RUN_ID", "flowrun-1")
    w0, w1 = log.writer(0), log.writer(1, run_id="other")
    a, b, c = scene("a"), scene("b"), scene("c")
    w0.append(record(a, windows=4, valid_pixels=100, positive_pixels=7, seconds=1.5, at=0))
    w1.append(record(c, "failed", reason="corrupt TIFF: bad IFD", at=1))
    w0.append(record(b, "skipped-full-nodata", at=2))
    got = log.read()
    assert [(r.scene_id, r.status) for r in got] == [("a", "done"), ("c", "failed"), ("b", "skipped-full-nodata")]
    assert got[0].windows == 4 and got[0].positive_pixels == 7 and got[0].flow_run_id == "flowrun-1"
    assert got[1].reason == "corrupt TIFF: bad IFD" and got[1].host
    assert w0.uri.endswith("log/chunk-00000-flowrun-1.jsonl") and w1.uri.endswith("log/chunk-00001-other.jsonl")
    # a retry of the same flow run (a fresh writer, same name) continues its file instead of replacing it
    log.writer(0).append(record(c, at=3))
    assert [r.scene_id for r in CampaignLog(root, retry=FAST).read()] == ["a", "c", "b", "c"]


def test_a_failed_record_needs_a_reason_and_a_long_one_is_cut() -> None:
    with pytest.raises(ValueError, match="reason"):
        SceneRecord.now(scene("a"), PKG_A, "failed")
    r = SceneRecord.now(scene("a"), PKG_A, "failed", reason="x" * 50_000)
    assert len(r.line()) < 4096


def test_a_torn_last_line_is_ignored_with_a_warning_and_the_next_run_appends_whole_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    log = CampaignLog(tmp_path / "out")
    w = log.writer(0, run_id="r1")
    w.append(record(scene("a"), at=0))
    w.append(record(scene("b"), at=1))
    path = Path(w.uri)
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])  # kill -9 mid-write: the last line lost its tail and newline
    with caplog.at_level(logging.WARNING):
        assert [r.scene_id for r in log.read()] == ["a"]
    assert f"{path}: line 2 is not a whole log record" in caplog.text
    log.writer(0, run_id="r1").append(record(scene("c"), at=2))  # the retried run reopens the same file
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert [r.scene_id for r in log.read()] == ["a", "c"]
    assert f"{path}: line 2" in caplog.text


def _append_many(root: str, tag: str, n: int) -> None:
    w = CampaignLog(root).writer(0, run_id="shared")
    for i in range(n):
        w.append(SceneRecord.now(scene(f"{tag}{i:04d}"), PKG_A, "failed", reason=tag * 900))


def test_concurrent_appends_from_two_processes_are_whole_lines(tmp_path: Path) -> None:
    root, n = str(tmp_path / "out"), 300
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_append_many, args=(root, tag, n)) for tag in ("p", "q")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    (path,) = (tmp_path / "out" / "log").iterdir()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2 * n
    ids = [json.loads(line)["scene_id"] for line in lines]  # every line parses: none interleaved
    assert sorted(ids) == sorted(f"{t}{i:04d}" for t in "pq" for i in range(n))


# --------------------------------------------------------------------------------------------- planning
def test_plan_skips_complete_scenes_of_the_same_input_and_package_and_redoes_the_rest() -> None:
    done, nodata, failed, changed, repackaged, new = (scene(n) for n in "abcdef")
    records = [
        record(done, at=0),
        record(nodata, "skipped-full-nodata", at=1),
        record(failed, "failed", reason="read error", at=2),
        record(changed, at=3),
        record(repackaged, package=PKG_B, at=4),
    ]
    edited = scene("d", sha="1" * 64)  # d's file was replaced since it was mapped
    todo = plan([new, done, nodata, failed, edited, repackaged], records, PKG_A)
    assert [s.scene_id for s in todo] == ["c", "d", "e", "f"]


def test_a_record_is_done_only_for_the_same_scene_identity_package_code_and_settings(tmp_path: Path) -> None:
    """Records made from another EXTRA raster, by other mapping code, with other settings, or written before records
    carried those (schema 1), are not resumed: their scenes are planned again, and counted by what differs."""
    extra = CompanionInput(role="extra", uri="/data/x_extra.tif", identity=InputIdentity(sha256="e" * 64, size=5))
    same, new_extra, new_code, new_settings, old = (
        Scene(n, f"/data/{n}.tif", InputIdentity(sha256="0" * 64, size=10), (extra,)) for n in "abcde"
    )
    other_code = PKG_A.model_copy(update={"code_sha256": "d" * 64})
    other_settings = PKG_A.model_copy(update={"settings": MapSettings(stride=16, batch_size=8)})
    schema_1 = record(old, at=4).model_dump(mode="json", exclude={"companions", "code_sha256", "settings"})
    log = CampaignLog(tmp_path / "out")
    w = log.writer(0, run_id="r")
    for r in (
        record(same, at=0),
        record(new_extra, at=1),
        record(new_code, package=other_code, at=2),
        record(new_settings, package=other_settings, at=3),
    ):
        w.append(r)
    with (Path(w.uri)).open("a") as f:  # a line an older version wrote
        f.write(json.dumps({**schema_1, "schema_version": 1}) + "\n")
    records = log.read()
    assert [r.schema_version for r in records] == [2, 2, 2, 2, 1]
    changed = extra.model_copy(update={"identity": InputIdentity(sha256="f" * 64, size=5)})
    scenes = [same, Scene("b", new_extra.uri, new_extra.identity, (changed,)), new_code, new_settings, old]
    assert [s.scene_id for s in plan(scenes, records, PKG_A)] == ["b", "c", "d", "e"]
    assert other_identity(scenes, records, PKG_A) == {
        "EXTRA raster changed": 1,
        "other mapping code": 1,
        "other settings": 1,
        OLDER_RECORD: 1,
    }
    s = summarize(scenes, records, PKG_A)
    assert (s.done, s.pending) == (1, 4)


def test_the_latest_record_of_a_scene_wins() -> None:
    a = scene("a")
    assert [s.scene_id for s in plan([a], [record(a, at=0), record(a, "failed", reason="oom", at=5)], PKG_A)] == ["a"]
    assert plan([a], [record(a, "failed", reason="oom", at=0), record(a, at=5)], PKG_A) == []
    # a newer run with another package replaced the outputs: package A must map it again
    assert plan([a], [record(a, at=0), record(a, package=PKG_B, at=5)], PKG_A) == [a]


def test_two_runs_writing_the_same_scene_count_it_once(tmp_path: Path) -> None:
    log = CampaignLog(tmp_path / "out")
    a, b = scene("a"), scene("b")
    # a pre-empted worker recorded `a` before dying; the retry (another flow run) maps `a` again, then `b`
    log.writer(0, run_id="first").append(record(a, windows=3, valid_pixels=10, positive_pixels=2, seconds=2, at=0))
    second = log.writer(0, run_id="second")
    second.append(record(a, windows=3, valid_pixels=10, positive_pixels=2, seconds=3, at=10))
    second.append(record(b, "failed", reason="corrupt", seconds=1, at=11))
    records = log.read()
    assert plan([a, b], records, PKG_A) == [b]
    s = summarize([a, b], records, PKG_A)
    assert (s.done, s.failed, s.skipped_full_nodata, s.pending) == (1, 1, 0, 0)
    assert (s.windows, s.valid_pixels, s.positive_pixels) == (3, 10, 2)
    assert s.failures == {"b": "corrupt"}
    assert s.seconds == 4 and s.seconds_all_attempts == 6


def test_the_summary_counts_other_packages_and_inputs_as_pending() -> None:
    a, b, c = scene("a"), scene("b"), scene("c")
    records = [record(a, at=0), record(b, package=PKG_B, at=1), record(c, "skipped-full-nodata", at=2)]
    s = summarize([a, b, c, scene("d")], records, PKG_A)
    assert (s.scenes, s.done, s.skipped_full_nodata, s.failed, s.pending) == (4, 1, 1, 0, 2)


def test_a_gs_log_survives_pickling_as_a_task_argument(gs_root: str) -> None:
    log = CampaignLog(gs_root, retry=FAST)
    log.writer(2, run_id="r").append(record(scene("a")))
    again = pickle.loads(pickle.dumps(log))
    assert [r.scene_id for r in again.read()] == ["a"]


def test_a_gs_log_read_through_a_mirror_downloads_only_what_changed_and_distrusts_a_changed_copy(
    gs_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud.storage import Blob

    downloads: list[str] = []
    real = Blob.download_as_bytes

    def counted(self: Blob, *args: object, **kw: object) -> bytes:
        downloads.append(self.name.rsplit("/", 1)[-1])
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Blob, "download_as_bytes", counted)
    mirror = tmp_path / "mirror"
    a, b, c = scene("a"), scene("b"), scene("c")
    w0, w1 = CampaignLog(gs_root, retry=FAST).writer(0, "r0"), CampaignLog(gs_root, retry=FAST).writer(1, "r1")
    w0.append(record(a, at=0))
    w1.append(record(b, at=1))
    downloads.clear()
    read = lambda: [r.scene_id for r in CampaignLog(gs_root, retry=FAST, mirror=mirror).read()]  # noqa: E731
    assert read() == ["a", "b"] and sorted(downloads) == ["chunk-00000-r0.jsonl", "chunk-00001-r1.jsonl"]
    downloads.clear()
    assert read() == ["a", "b"] and downloads == []  # both from the mirror
    w1.append(record(c, at=2))  # a new generation of r1's object: only it is downloaded, its old copy removed
    assert read() == ["a", "b", "c"] and downloads == ["chunk-00001-r1.jsonl"]
    kept = sorted(p.name for p in mirror.iterdir())
    assert len(kept) == 2 and [k.rpartition("@")[0] for k in kept] == ["chunk-00000-r0.jsonl", "chunk-00001-r1.jsonl"]
    copy = mirror / kept[0]  # a bit flipped in the copy (same size): its CRC32C differs, it is downloaded again
    data = bytearray(copy.read_bytes())
    data[5] ^= 0x01
    copy.write_bytes(bytes(data))
    downloads.clear()
    assert read() == ["a", "b", "c"] and downloads == ["chunk-00000-r0.jsonl"]
    # the mirror is the finish's: a chunk run's read of its own chunk neither needs nor prunes it
    assert [r.scene_id for r in CampaignLog(gs_root, retry=FAST).read(chunk=1)] == ["b", "c"]
