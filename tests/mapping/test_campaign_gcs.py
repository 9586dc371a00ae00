"""A mapping campaign with gs:// input and output against the storage emulator: the same records, byte-identical
published scene files and equal objects as the local campaign; re-runs; a scene or its EXTRA object rewritten after
listing; a rewritten EXTRA object maps its scene again; the campaign end reads parts files, no raster."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import shapely

from flows.cli.main import parser
from flows.mapping import region
from flows.params.mapping import MapRegionParams
from rtscore.inference.predict import load_package, predict_raster
from rtscore.mapping.campaign import (
    INDEX_FILE,
    OBJECTS_FILE,
    SUMMARY_JSON,
    SUMMARY_MD,
    CampaignRoot,
    mapping_identity,
    run_campaign,
    run_chunk,
    scene_outputs,
    write_campaign_outputs,
)
from rtscore.mapping.campaign_log import CampaignLog, SceneRecord
from rtscore.mapping.objects_layer import read_objects
from rtscore.mapping.outputs import STAGING_DIR
from rtscore.mapping.scenes import list_scenes
from rtscore.storage.gcs import make_client
from tests.conftest import GCS_TEST_BUCKET
from tests.mapping.scenes import synth_tiles, write_scene_package, write_scene_set
from tests.mapping.test_campaign import VALID, write_extra, write_extra_scenes, write_scenes
from tests.test_predict import write_package


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


@pytest.fixture
def gs_root(gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RTS_CACHE_DIR", str(tmp_path / "cache"))
    return f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}"


def _bucket_and_name(uri: str) -> tuple[str, str]:
    bucket, _, name = uri.removeprefix("gs://").partition("/")
    return bucket, name


def upload(uri: str, data: bytes) -> None:
    bucket, name = _bucket_and_name(uri)
    make_client().bucket(bucket).blob(name).upload_from_string(data)


def download(uri: str) -> bytes | None:
    bucket, name = _bucket_and_name(uri)
    blob = make_client().bucket(bucket).get_blob(name)
    return None if blob is None else blob.download_as_bytes()


def records_of(root: str | Path) -> list[tuple[str, str, int, int, int]]:
    return sorted(
        (r.scene_id, r.status, r.windows, r.valid_pixels, r.positive_pixels) for r in CampaignLog(root).read()
    )


def objects_of(path: Path) -> list[tuple[object, ...]]:
    crs, objects = read_objects(path)
    return [
        (crs.to_epsg(), o.scene_ids, o.n_pixels, o.prob_mean, o.area_m2, o.partial, shapely.to_wkb(o.geometry))
        for o in objects
    ]


def test_gs_campaigns_match_the_local_one(package: Path, gs_root: str, tmp_path: Path) -> None:
    scenes_dir = write_scenes(tmp_path / "in")
    local = tmp_path / "local"
    want = run_campaign(package, scenes_dir, local, chunk_size=2)
    gs_in = f"{gs_root}/input"
    for f in sorted(scenes_dir.iterdir()):
        upload(f"{gs_in}/{f.name}", f.read_bytes())
    by_id = {s.scene_id: s for s in list_scenes(scenes_dir)}
    gs_by_id = {s.scene_id: s for s in list_scenes(gs_in)}
    for case, source in (("a", scenes_dir), ("b", gs_in)):  # (a) local scenes, (b) gs:// scenes; gs:// output
        out = f"{gs_root}/out-{case}"
        summary = run_campaign(package, source, out, chunk_size=2)
        assert records_of(out) == records_of(local), case
        assert (summary.done, summary.skipped_full_nodata, summary.failed) == (3, 1, 1)
        assert summary.km2_mapped_ground == want.km2_mapped_ground
        assert summary.objects == want.objects and summary.log == f"{out}/log"
        root = CampaignRoot(out)
        for name in VALID:  # published scene files byte-identical to the local campaign's (hence rts predict's)
            mine, ref = scene_outputs(root, gs_by_id[name]), scene_outputs(local, by_id[name])
            for got_path, ref_path in ((mine.prob, ref.prob), (mine.mask, ref.mask), (mine.parts, ref.parts)):
                assert download(root.uri_of(root.rel(got_path))) == ref_path.read_bytes(), (case, got_path.name)
            manifest = json.loads(download(root.uri_of(root.rel(mine.manifest))) or b"{}")
            assert manifest["input"] == (gs_by_id if case == "b" else by_id)[name].uri
            assert manifest["prob"] == root.uri_of(root.rel(mine.prob))
        assert download(root.uri_of("scenes/nodata/nodata_mask.tif")) is None
        gpkg = tmp_path / f"objects-{case}.gpkg"
        gpkg.write_bytes(download(root.uri_of(OBJECTS_FILE)) or b"")
        assert objects_of(gpkg) == objects_of(local / OBJECTS_FILE)
        index = json.loads(download(root.uri_of(INDEX_FILE)) or b"{}")
        assert sorted(f["properties"]["scene_id"] for f in index["features"]) == list(VALID)
        assert json.loads(download(root.uri_of(SUMMARY_JSON)) or b"{}")["done"] == 3
        assert f"`{out}/log`" in (download(root.uri_of(SUMMARY_MD)) or b"").decode()
        assert download(root.uri_of("drift/drift_report.json")) is not None
    # no staged scene outlives its mapping
    staging = tmp_path / "cache" / STAGING_DIR
    assert staging.is_dir() and not list(staging.iterdir())  # (b) staged its scenes there, and removed them

    # a re-run of (b) maps nothing new: the corrupt scene is retried (failing again), no scene is mapped twice
    out_b = f"{gs_root}/out-b"
    before = records_of(out_b)
    run_campaign(package, gs_in, out_b, chunk_size=2)
    after = records_of(out_b)
    assert sorted(set(after)) == sorted(set(before)) and len(after) == len(before) + 1
    assert [r[:2] for r in after].count(("corrupt", "failed")) == 2


def test_a_scene_rewritten_after_listing_fails_naming_both_generations(
    package: Path, gs_root: str, tmp_path: Path
) -> None:
    scene_bytes = (write_scenes(tmp_path / "src") / "a.tif").read_bytes()
    upload(f"{gs_root}/input/a.tif", scene_bytes)
    scenes = list_scenes(f"{gs_root}/input")
    upload(f"{gs_root}/input/a.tif", scene_bytes)  # rewritten: same bytes, a new generation
    listed = scenes[0].identity.generation
    now = list_scenes(f"{gs_root}/input")[0].identity.generation
    assert listed != now
    out = f"{gs_root}/out"
    (record,) = run_chunk(package, scenes, out, CampaignLog(out).writer(0))
    assert record.status == "failed"
    reason = record.reason or ""
    assert f"{gs_root}/input/a.tif" in reason and f"generation {listed}" in reason and f"generation {now}" in reason
    assert download(f"{out}/scenes/a/a_prob.tif") is None


@pytest.fixture(scope="module")
def extra_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package", extra=[{"name": "ndvi", "band": 0}])


def new_records(root: str, before: list[SceneRecord]) -> list[tuple[str, str]]:
    seen = {(r.scene_id, r.time) for r in before}
    return sorted((r.scene_id, r.status) for r in CampaignLog(root).read() if (r.scene_id, r.time) not in seen)


def test_a_rewritten_extra_object_maps_its_scene_again(extra_package: Path, gs_root: str, tmp_path: Path) -> None:
    """The identity of a gs:// scene covers its EXTRA object's generation: rewriting that object (new values) maps
    the scene again, and only it; its published probabilities change and its manifest names the object."""
    d = write_extra_scenes(tmp_path / "in")
    gs_in, out = f"{gs_root}/input", f"{gs_root}/out"
    for f in sorted(d.iterdir()):
        upload(f"{gs_in}/{f.name}", f.read_bytes())
    summary = run_campaign(extra_package, gs_in, out, chunk_size=2)
    assert (summary.done, summary.failed) == (3, 0)
    root, by_id = CampaignRoot(out), {s.scene_id: s for s in list_scenes(gs_in)}
    prob = {n: root.uri_of(root.rel(scene_outputs(root, by_id[n]).prob)) for n in VALID}
    first = {n: download(u) for n, u in prob.items()}

    upload(f"{gs_in}/b_extra.tif", write_extra(tmp_path / "new_extra.tif", 99).read_bytes())
    before = CampaignLog(out).read()
    summary = run_campaign(extra_package, gs_in, out, chunk_size=2)
    assert new_records(out, before) == [("b", "done")]
    assert (summary.done, summary.failed, summary.pending) == (3, 0, 0)
    assert download(prob["b"]) != first["b"] and [download(prob[n]) for n in "ac"] == [first[n] for n in "ac"]
    manifest = json.loads(download(root.uri_of(root.rel(scene_outputs(root, by_id["b"]).manifest))) or b"{}")
    assert manifest["extra_input"] == f"{gs_in}/b_extra.tif"


def test_an_extra_object_rewritten_after_listing_fails_its_scene_naming_both_generations(
    extra_package: Path, gs_root: str, tmp_path: Path
) -> None:
    d = write_extra_scenes(tmp_path / "in")
    gs_in, out = f"{gs_root}/input", f"{gs_root}/out"
    for name in ("a.tif", "a_extra.tif"):
        upload(f"{gs_in}/{name}", (d / name).read_bytes())
    (scene,) = [s for s in list_scenes(gs_in, extra=True) if s.scene_id == "a"]
    upload(f"{gs_in}/a_extra.tif", (d / "a_extra.tif").read_bytes())  # rewritten: same bytes, a new generation
    assert scene.extra is not None and scene.extra.identity is not None
    listed = scene.extra.identity.generation
    now = next(s for s in list_scenes(gs_in, extra=True) if s.scene_id == "a").extra
    assert now is not None and now.identity is not None and now.identity.generation != listed
    (record,) = run_chunk(extra_package, [scene], out, CampaignLog(out).writer(0))
    assert record.status == "failed"
    reason = record.reason or ""
    assert f"{gs_in}/a_extra.tif" in reason
    assert f"generation {listed}" in reason and f"generation {now.identity.generation}" in reason
    assert download(f"{out}/scenes/a/a_prob.tif") is None


def test_the_campaign_end_reads_parts_files_not_rasters(
    package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rasterio

    scenes_dir = write_scenes(tmp_path / "in")
    out = tmp_path / "campaign"
    want = run_campaign(package, scenes_dir, out, chunk_size=5, drift_check=False)
    for tif in (out / "scenes").rglob("*.tif"):
        tif.unlink()

    def no_raster(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"the campaign end opened a raster: {args}")

    monkeypatch.setattr(rasterio, "open", no_raster)
    (out / OBJECTS_FILE).unlink()
    scenes = list_scenes(scenes_dir)
    got = write_campaign_outputs(scenes, CampaignLog(out), out, mapping_identity(load_package(package)))
    assert (got.objects, got.km2_mapped_ground) == (want.objects, want.km2_mapped_ground)
    assert (out / OBJECTS_FILE).is_file()


def test_rts_map_takes_a_gs_output() -> None:
    args = parser().parse_args(["map", "--package", "p", "--input", "gs://b-1/in", "--output", "gs://b-1/out"])
    assert args.output == "gs://b-1/out"


def test_a_scene_is_recorded_done_only_after_all_its_files_are_published(
    package: Path, gs_root: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtscore.storage.errors import StorageError

    scenes = [s for s in list_scenes(write_scenes(tmp_path / "in")) if s.scene_id == "a"]
    out = f"{gs_root}/out"
    real = CampaignRoot.publish

    def failing(self: CampaignRoot, paths: list[Path]) -> None:
        real(self, paths[:2])  # some objects land, then the "worker" loses the bucket
        raise StorageError("upload of the manifest failed: connection reset")

    monkeypatch.setattr(CampaignRoot, "publish", failing)
    (record,) = run_chunk(package, scenes, out, CampaignLog(out).writer(0))
    assert record.status == "failed" and "connection reset" in (record.reason or "")
    monkeypatch.setattr(CampaignRoot, "publish", real)
    (record,) = run_chunk(package, scenes, out, CampaignLog(out).writer(1))
    assert record.status == "done"  # re-mapped: the half-published scene had no done record
    o = scene_outputs(CampaignRoot(out), scenes[0])
    assert download(f"{out}/scenes/a/{o.parts.name}") == o.parts.read_bytes()


@pytest.mark.slow
def test_the_server_tests_campaign_with_a_gs_output_through_the_map_region_flow(gs_root: str, tmp_path: Path) -> None:
    """A campaign like tests/flows/test_mapping_server.py's (synth-geotiff mosaics, one full NoData, one corrupt, 4
    chunks), at 8 scenes of 2 a chunk, through the map-region flow's body (execution local) into a gs:// output: every
    valid scene done once, its published COGs byte-identical to rts predict's on the same scene; the NoData scene
    skipped, the corrupt one failed naming its file; the campaign files in the bucket."""
    tiles = synth_tiles(tmp_path / "tiles")
    scenes = write_scene_set(tmp_path / "scenes", tiles, n_valid=6, nodata_at=3, corrupt_at=6)
    package = write_scene_package(tmp_path / "package", tiles)
    out = f"{gs_root}/campaign"
    summary = region(
        MapRegionParams(package=str(package), input=str(scenes.root), output=out, chunk_size=2, device="cpu"), None
    )
    records = CampaignLog(out).read()
    assert sorted(r.scene_id for r in records if r.status == "done") == sorted(scenes.valid)
    assert [(r.scene_id, r.status) for r in records if r.status != "done"] == sorted(
        [(scenes.nodata, "skipped-full-nodata"), (scenes.corrupt, "failed")]
    )
    failed = next(r for r in records if r.status == "failed")
    assert f"{scenes.corrupt}.tif" in (failed.reason or "")
    assert len({r.scene_id for r in records}) == len(records) == 8
    assert len({name for name, _ in CampaignLog(out).files()}) == 4  # one log object per chunk
    root, by_id = CampaignRoot(out), {s.scene_id: s for s in list_scenes(scenes.root)}
    for name in scenes.valid:
        ref = predict_raster(package, scenes.root / f"{name}.tif", tmp_path / "ref", device="cpu")
        got = scene_outputs(root, by_id[name])
        assert download(root.uri_of(root.rel(got.prob))) == ref.prob.read_bytes(), name
        assert download(root.uri_of(root.rel(got.mask))) == ref.mask.read_bytes(), name
    assert (summary.done, summary.skipped_full_nodata, summary.failed) == (6, 1, 1)
    for name in (OBJECTS_FILE, INDEX_FILE, SUMMARY_JSON, SUMMARY_MD):
        assert download(root.uri_of(name)) is not None, name
