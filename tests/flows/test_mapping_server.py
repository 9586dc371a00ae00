"""A mapping campaign survives losing a chunk's worker (issue 14): a real Prefect server, a cpu and two gpu workers.

The campaign input holds 14 scenes (mosaics of `rts synth-geotiff` tiles; one without a valid pixel, one corrupt
file), mapped by a `map-region` deployment run with `execution: distributed` in 3 chunks (5, 5 and 4 scenes).
Gpu worker A (`--limit 1`, its own RTS_CACHE_DIR) takes the first map-chunk run; once that
chunk's log file holds some of its scenes but not all, worker A and its flow-run process are killed with SIGKILL (a
pre-empted VM). The run's heartbeats stop, the zombie automation (deployments/zombie_automation.py) marks it
Crashed, the fan-out re-submits the chunk, and worker B (its own RTS_CACHE_DIR) maps only the chunk's scenes the
killed run had not logged, and the other chunks. The map-region run completes; a retry of it from the UI (back to
Scheduled, same flow run) completes again without mapping anything. Every valid scene has exactly one `done`
record over all log files, the NoData scene is `skipped-full-nodata`, the corrupt one `failed` naming its file, and
each done scene's probability and mask COGs are byte-identical to `rts predict`'s on the same scene and package.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import pytest

from rtscore.inference.predict import predict_raster
from rtscore.mapping.campaign import INDEX_FILE, OBJECTS_FILE, SUMMARY_JSON, SUMMARY_MD, scene_outputs
from rtscore.mapping.campaign_log import CampaignLog, SceneRecord
from rtscore.mapping.scenes import list_scenes
from rtscore.storage import CACHE_ENV
from tests.flows.prefect_server import RUN_TIMEOUT_S, Server, borrow, kill_machine, wait_final
from tests.mapping.scenes import SceneSet, synth_tiles, write_scene_package, write_scene_set

CHUNK = 5  # 14 scenes: 3 chunks, the last one of 4 (each chunk's run is a process start: no more than needed)
LARGE = ("s01",)  # chunk 0's second scene is a 4x4-tile mosaic: once s00 is logged, seconds to kill the chunk mid-way
MAP_CHUNK_KEY = "rts-pipeline/{parent}/map-chunk/"  # flows.fanout.idempotency_key's prefix for this stage


@pytest.fixture(scope="module")
def server(prefect_server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The session's server, with the zombie automation; the workers are started by the test."""
    with borrow(prefect_server, tmp_path_factory.mktemp("mapping-server") / "logs") as srv:
        yield srv


def _complete_records(path: Path) -> list[SceneRecord]:
    """The whole records of one log file (a line still being written is not one yet)."""
    try:
        content = path.read_bytes()
    except FileNotFoundError:
        return []
    lines = content.split(b"\n")[:-1]  # the part after the last newline is not a whole line
    return [SceneRecord.model_validate_json(line) for line in lines if line.strip()]


def _chunk_of(path: Path) -> int:
    return int(path.name.split("-")[1])  # chunk-<k:05d>-<run id>.jsonl (rtscore.mapping.campaign_log.writer_name)


def _mid_chunk(log_dir: Path, chunks: list[list[str]]) -> Path | None:
    """A chunk log file holding some of its chunk's scenes but not all, if there is one."""
    for path in sorted(log_dir.glob("chunk-*.jsonl")) if log_dir.is_dir() else []:
        n = len(_complete_records(path))
        if 1 <= n < len(chunks[_chunk_of(path)]):
            return path
    return None


def _map_chunk_runs(srv: Server, parent: UUID) -> list[Any]:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterId

    with srv.client() as client:
        deployment = client.read_deployment_by_name("map-chunk/stage-map-chunk")
        runs = client.read_flow_runs(deployment_filter=DeploymentFilter(id=DeploymentFilterId(any_=[deployment.id])))
        mine = [r for r in runs if (r.idempotency_key or "").startswith(MAP_CHUNK_KEY.format(parent=parent))]
        parents = {r.id: client.read_task_run(r.parent_task_run_id).flow_run_id for r in mine}
    for r in mine:
        assert r.deployment_id == deployment.id and parents[r.id] == parent, r
    return mine


def _references(scenes: SceneSet, package: Path, out: Path) -> dict[str, tuple[bytes, bytes]]:
    """`rts predict` (its library function) on each valid scene with the same package: prob and mask bytes."""
    refs = {}
    for scene_id in scenes.valid:
        got = predict_raster(package, scenes.path(scene_id), out / scene_id)
        refs[scene_id] = (got.prob.read_bytes(), got.mask.read_bytes())
    return refs


@pytest.mark.slow
def test_a_campaign_whose_chunk_worker_is_killed_maps_every_scene_once_like_rts_predict(
    server: Server, tmp_path: Path
) -> None:
    from prefect.client.schemas.objects import FlowRun
    from prefect.deployments import run_deployment
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import AwaitingRetry

    started = time.monotonic()
    tiles = synth_tiles(tmp_path / "tiles")
    scenes = write_scene_set(tmp_path / "scenes", tiles, n_valid=12, large=LARGE)
    package = write_scene_package(tmp_path / "package", tiles)
    out = tmp_path / "campaign"
    ids = scenes.ids
    chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
    assert len(ids) >= 14 and len(chunks) >= 3

    server.env[CACHE_ENV] = str(tmp_path / "cpu-cache")
    server.start("worker-cpu", "worker", "start", "--pool", "cpu-process")
    cache_a, cache_b = tmp_path / "gpu-a-cache", tmp_path / "gpu-b-cache"
    server.env[CACHE_ENV] = str(cache_a)
    worker_a = server.start("worker-gpu-a", "worker", "start", "--pool", "gpu", "--limit", "1")  # one chunk at a time

    params = {
        "package": str(package),
        "input": str(scenes.root),
        "output": str(out),
        "chunk_size": CHUNK,
        "device": "cpu",
        "execution": "distributed",
        "distributed": {"poll_interval_s": 1.0, "timeout_s": RUN_TIMEOUT_S, "max_attempts": 3},
    }
    with temporary_settings(updates={PREFECT_API_URL: server.url}):
        # run_deployment is typed sync-or-async; called sync, it returns the FlowRun
        region = cast(FlowRun, run_deployment("map-region/rts-map-region", parameters={"params": params}, timeout=0))

    # Kill worker A while its chunk is mid-way: some of the chunk's scenes logged, not all.
    deadline = time.monotonic() + RUN_TIMEOUT_S
    killed: Path | None = None
    next_check = 0.0
    while killed is None:
        assert time.monotonic() < deadline, f"no chunk caught mid-way:\n{server.log_tail()}"
        killed = _mid_chunk(out / "log", chunks)
        if killed is None and time.monotonic() > next_check:  # a campaign that ended (or failed) first: say so
            next_check = time.monotonic() + 5
            with server.client() as client:
                state = client.read_flow_run(region.id).state
            assert not state.is_final(), f"map-region ended {state} before a chunk was caught:\n{server.log_tail()}"
        time.sleep(0.05)
    kill_machine(worker_a)
    mapped_by_killed = [r.scene_id for r in _complete_records(killed)]  # what the killed run logged, final now
    killed_chunk = chunks[_chunk_of(killed)]
    assert 1 <= len(mapped_by_killed) < len(killed_chunk), (killed.name, mapped_by_killed)

    assert not cache_b.exists()
    server.env[CACHE_ENV] = str(cache_b)
    server.start("worker-gpu-b", "worker", "start", "--pool", "gpu")

    refs: dict[str, tuple[bytes, bytes]] = {}  # rts predict on the same scenes, while the zombie timeout runs
    reference = threading.Thread(target=lambda: refs.update(_references(scenes, package, tmp_path / "ref")))
    reference.start()
    first = wait_final(server, region.id)
    reference.join()
    assert first.state.is_completed(), f"map-region ended {first.state}:\n{server.log_tail()}"

    # One map-chunk run per chunk on the gpu pool, children of map-region; the killed one Crashed and re-submitted.
    runs = _map_chunk_runs(server, region.id)
    assert all(r.work_pool_name == "gpu" for r in runs)
    by_key = {r.idempotency_key.removeprefix(MAP_CHUNK_KEY.format(parent=region.id)): r for r in runs}
    k = _chunk_of(killed)
    assert sorted(by_key) == sorted([*map(str, range(len(chunks))), f"{k}/attempt-1"]), sorted(by_key)
    crashed = by_key[str(k)]
    assert crashed.state.is_crashed() and "heartbeat" in (crashed.state.message or ""), crashed.state
    assert all(r.state.is_completed() for key, r in by_key.items() if key != str(k)), by_key
    assert [r.parameters["params"]["scene_ids"] for key, r in sorted(by_key.items()) if "/" not in key] == chunks
    assert killed.name == f"chunk-{k:05d}-{crashed.id}.jsonl"

    # The log: every valid scene done exactly once, over all files; the killed chunk split between its two runs.
    records = CampaignLog(out).read()
    done = sorted(r.scene_id for r in records if r.status == "done")
    assert done == sorted(scenes.valid), done
    assert [(r.scene_id, r.status) for r in records if r.scene_id == scenes.nodata] == [
        (scenes.nodata, "skipped-full-nodata")
    ]
    corrupt = [r for r in records if r.scene_id == scenes.corrupt]
    assert len(corrupt) == 1 and corrupt[0].status == "failed", corrupt
    assert f"{scenes.corrupt}.tif" in (corrupt[0].reason or ""), corrupt[0].reason
    retried = by_key[f"{k}/attempt-1"]
    of_chunk = {r.scene_id: r.flow_run_id for r in records if r.scene_id in killed_chunk}
    assert of_chunk == {s: str(crashed.id if s in mapped_by_killed else retried.id) for s in killed_chunk}

    # Outputs: byte-identical to rts predict; campaign files consistent with the log.
    listed = {s.scene_id: s for s in list_scenes(scenes.root)}
    for scene_id in scenes.valid:
        o = scene_outputs(out, listed[scene_id])
        assert (o.prob.read_bytes(), o.mask.read_bytes()) == refs[scene_id], f"{scene_id} differs from rts predict"
    summary = json.loads((out / SUMMARY_JSON).read_text())
    assert (summary["scenes"], summary["done"], summary["skipped_full_nodata"], summary["failed"]) == (
        len(ids),
        len(scenes.valid),
        1,
        1,
    )
    assert summary["pending"] == 0 and scenes.corrupt in summary["failures"]
    index = json.loads((out / INDEX_FILE).read_text())
    assert sorted(f["properties"]["scene_id"] for f in index["features"]) == sorted(scenes.valid)
    assert (out / OBJECTS_FILE).is_file() and (out / SUMMARY_MD).is_file()

    # A retry of the campaign from the UI (same flow run back to Scheduled): completes, maps nothing again.
    logs_before = CampaignLog(out).files()
    outputs_before = {p: p.stat().st_mtime_ns for p in (out / "scenes").rglob("*") if p.is_file()}
    with server.client() as client:
        result = client.set_flow_run_state(region.id, AwaitingRetry(message="Retry from the test"))
        assert result.status.value == "ACCEPT", result
    again = wait_final(server, region.id)
    assert again.state.is_completed(), f"the retry ended {again.state}:\n{server.log_tail()}"
    assert sorted(r.id for r in _map_chunk_runs(server, region.id)) == sorted(r.id for r in runs)
    assert CampaignLog(out).files() == logs_before
    assert {p: p.stat().st_mtime_ns for p in (out / "scenes").rglob("*") if p.is_file()} == outputs_before
    assert json.loads((out / SUMMARY_JSON).read_text())["done"] == len(scenes.valid)
    print(f"mapping server test: {time.monotonic() - started:.0f} s after the server started")
