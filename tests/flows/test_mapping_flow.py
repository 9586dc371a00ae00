"""The map-region / map-chunk flows: a local campaign in a flow run maps like run_campaign; a distributed one starts
one map-chunk run per chunk (keys, parameters), re-submits a crashed chunk whose re-run skips what was logged, and
builds the campaign's outputs and artifacts from the log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flows.fanout import idempotency_key
from flows.params import FanOutSettings
from flows.params.mapping import MapChunkParams, MapRegionParams
from rtscore.mapping.campaign import (
    DEFAULT_CHUNK_SIZE,
    OBJECTS_FILE,
    SUMMARY_JSON,
    run_campaign,
    scene_outputs,
)
from rtscore.mapping.campaign_log import CampaignLog
from rtscore.mapping.scenes import list_scenes
from tests.flows.test_orchestration import FAST, FakePrefect
from tests.mapping.test_campaign import VALID, write_scenes
from tests.test_predict import write_package

EXPECTED = sorted([(s, "done") for s in VALID] + [("nodata", "skipped-full-nodata"), ("corrupt", "failed")])
SUMMARY_FIELDS = (
    "scenes",
    "done",
    "skipped_full_nodata",
    "failed",
    "pending",
    "windows",
    "objects",
    "km2_mapped_ground",
)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_package(tmp_path_factory.mktemp("pkg") / "package")


@pytest.fixture
def scenes_dir(tmp_path: Path) -> Path:
    return write_scenes(tmp_path / "scenes_in")


def records(out: Path) -> list[tuple[str, str]]:
    return sorted((r.scene_id, r.status) for r in CampaignLog(out).read())


def test_region_defaults_match_the_library() -> None:
    p = MapRegionParams(package="p", input="i", output="o")
    assert p.chunk_size == DEFAULT_CHUNK_SIZE and p.execution == "local"
    assert isinstance(p.distributed, FanOutSettings)  # fan_out reads the campaign's own settings, no copy


def test_local_map_region_flow_maps_like_run_campaign(
    prefect_harness: None, package: Path, scenes_dir: Path, tmp_path: Path
) -> None:
    from flows.mapping import map_region

    out, ref = tmp_path / "flow", tmp_path / "ref"
    got = map_region(MapRegionParams(package=str(package), input=str(scenes_dir), output=str(out), chunk_size=2))
    want = run_campaign(package, scenes_dir, ref, chunk_size=2)
    assert records(out) == records(ref) == EXPECTED
    assert {k: getattr(got, k) for k in SUMMARY_FIELDS} == {k: getattr(want, k) for k in SUMMARY_FIELDS}
    assert (out / OBJECTS_FILE).is_file() and (out / SUMMARY_JSON).is_file()
    for s in list_scenes(scenes_dir):
        if s.scene_id in VALID:
            a, b = scene_outputs(out, s), scene_outputs(ref, s)
            assert a.prob.read_bytes() == b.prob.read_bytes() and a.mask.read_bytes() == b.mask.read_bytes()
    # A re-run maps only the failed scene again (done and skipped scenes are complete in the log).
    map_region(MapRegionParams(package=str(package), input=str(scenes_dir), output=str(out), chunk_size=2))
    assert records(out) == sorted([*EXPECTED, ("corrupt", "failed")])


class ChunkWorkers(FakePrefect):
    """FakePrefect whose map-chunk runs do their work in process when created: a run planned to crash maps only
    its chunk's first scene (a worker killed mid-chunk), every other run its whole chunk."""

    def run_deployment(self, name: str, **kw: Any) -> Any:
        from flows.mapping import map_chunk

        new = kw["idempotency_key"] not in self.runs
        run = super().run_deployment(name, **kw)
        if new:
            params = MapChunkParams.model_validate(kw["parameters"]["params"])
            if self.runs[kw["idempotency_key"]][-1] == "crashed":
                params = params.model_copy(update={"scene_ids": params.scene_ids[:1]})
            map_chunk.fn(params)
        return run


def test_distributed_map_region_fans_out_one_chunk_run_each_and_resubmits_a_crashed_one(
    monkeypatch: pytest.MonkeyPatch, package: Path, scenes_dir: Path, tmp_path: Path
) -> None:
    import flows.mapping as mapping
    from flows.mapping import map_chunk, region

    published: list[tuple[str, Any]] = []
    monkeypatch.setattr(mapping, "create_markdown_artifact", lambda **kw: published.append((kw["key"], kw)))
    monkeypatch.setattr(mapping.ui, "publish_table", lambda key, rows, description: published.append((key, rows)))
    monkeypatch.setattr(mapping.ui, "in_a_run", lambda: True)  # the flow's body, called as in its run
    crashed = idempotency_key("p", "map-chunk", 1)
    fake = ChunkWorkers({crashed: ["running", "crashed"]})
    fake.install(monkeypatch)
    out = tmp_path / "campaign"
    params = MapRegionParams(
        package=str(package),
        input=str(scenes_dir),
        output=str(out),
        chunk_size=2,
        execution="distributed",
        distributed={"deployment": "map-chunk/gpu-test", **FAST},
    )
    summary = region(params, "p")

    # one run per chunk (scenes sorted by id: a b | c corrupt | nodata), the crashed chunk once more
    assert fake.created == [
        idempotency_key("p", "map-chunk", 0),
        crashed,
        idempotency_key("p", "map-chunk", 2),
        idempotency_key("p", "map-chunk", 1, 1),
    ]
    sent = [MapChunkParams.model_validate(c["parameters"]["params"]) for c in fake.calls]
    assert [(p.chunk, p.scene_ids) for p in sent] == [
        (0, ["a", "b"]),
        (1, ["c", "corrupt"]),
        (2, ["nodata"]),
        (1, ["c", "corrupt"]),
    ]
    assert {(c["name"], tuple(c["tags"]), c["timeout"]) for c in fake.calls} == {
        ("map-chunk/gpu-test", ("rts-map",), 0)
    }
    assert [c["flow_run_name"] for c in fake.calls] == [
        "map-chunk-0",
        "map-chunk-1",
        "map-chunk-2",
        "map-chunk-1-retry-1",
    ]
    assert all(
        Path(p.package).is_absolute() and Path(p.input).is_absolute() and Path(p.output).is_absolute() for p in sent
    )

    # every scene exactly once (c was mapped by the crashed run, the re-submitted one skipped it), outputs from the log
    assert records(out) == EXPECTED
    assert (summary.done, summary.skipped_full_nodata, summary.failed, summary.pending) == (3, 1, 1, 0)
    assert (out / OBJECTS_FILE).is_file() and (out / SUMMARY_JSON).is_file()
    keys = [k for k, _ in published]
    assert keys == ["map-region-summary", "map-region-scenes"]
    assert dict(published)["map-region-scenes"] == [
        {"status": "done", "scenes": 3},
        {"status": "skipped-full-nodata", "scenes": 1},
        {"status": "failed", "scenes": 1},
        {"status": "pending", "scenes": 0},
    ]
    (attempts,) = fake.tables
    assert attempts["key"] == "map-chunk-attempts"
    assert [(r["item"], r["attempt"], r["final state"]) for r in attempts["table"]] == [
        ("chunk 0", 1, "COMPLETED"),
        ("chunk 1", 1, "CRASHED"),
        ("chunk 1", 2, "COMPLETED"),
        ("chunk 2", 1, "COMPLETED"),
    ]
    # a chunk run is idempotent: run again, it appends nothing
    assert map_chunk.fn(sent[0]) == {}
    assert records(out) == EXPECTED


def test_a_chunk_worker_of_another_mapping_identity_refuses_the_chunk_before_mapping(
    package: Path, scenes_dir: Path, tmp_path: Path
) -> None:
    """map-region sends its mapping identity with every chunk; a worker whose own differs (another code version or
    package under the same path) refuses the chunk naming both, and writes nothing."""
    from flows.mapping import chunk_children, map_chunk
    from rtscore.mapping.campaign import prepare_campaign
    from rtscore.mapping.scenes import CampaignError

    out = tmp_path / "campaign"
    params = MapRegionParams(package=str(package), input=str(scenes_dir), output=str(out), chunk_size=2)
    plan = prepare_campaign(params.package, params.input, params.output, params.chunk_size, drift_check=False)
    sent = [MapChunkParams.model_validate(c.params.model_dump()) for c in chunk_children(params, plan)]
    assert {p.mapping_identity for p in sent} == {plan.identity.digest()}
    other = sent[0].model_copy(update={"mapping_identity": "f" * 64})
    with pytest.raises(
        CampaignError, match=rf"map-chunk 0: this worker maps under identity {plan.identity.digest()[:12]}"
    ):
        map_chunk.fn(other)
    assert CampaignLog(out).read() == []
    assert map_chunk.fn(sent[0]) == {"done": 2}  # the campaign's own identity: mapped
