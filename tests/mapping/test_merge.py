"""The incremental merge equals a full merge_parts: scenes arriving in random orders over several finishes, scenes
re-mapped with other parts, a scene no longer done; the state is thrown away when it cannot be built on."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pytest
import shapely
from rasterio.transform import Affine

from rtscore.mapping.merge import merge_incremental, read_state
from rtscore.mapping.polygons import RtsObject, SceneParts, merge_parts, vectorise_scene

UTM = "EPSG:32633"
N, PX = 48, 2.0  # scene size (pixels) and pixel size (m)


def grid_scene(row: int, col: int, seed: int, *, overlap: int = 0) -> SceneParts:
    """Scene (row, col) of a grid of adjacent N x N scenes (shifted by ``overlap`` px into its west neighbour):
    random blobs, some cut by the scene's borders, a NoData corner in some."""
    rng = np.random.default_rng(seed)
    x0 = 500_000.0 + (col * N - overlap) * PX
    t = Affine(PX, 0.0, x0, 0.0, -PX, 7_000_000.0 - row * N * PX)
    yy, xx = np.mgrid[0:N, 0:N]
    positive = np.zeros((N, N), bool)
    for _ in range(6):
        cy, cx, r = rng.integers(-4, N + 4), rng.integers(-4, N + 4), rng.integers(2, 7)
        positive |= (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
    positive[:, 0] |= rng.random(N) < 0.3  # pixels on the west border: objects across the seam
    positive[0, :] |= rng.random(N) < 0.3
    mapped = np.ones((N, N), bool)
    if seed % 3 == 0:
        mapped[N - 10 :, N - 10 :] = False
    prob = rng.random((N, N)).astype(np.float32)
    return vectorise_scene(positive, mapped, prob, t, UTM, f"s{row}{col}-{seed % 97}")


def rows(objects: list[RtsObject]) -> list[tuple[object, ...]]:
    return [
        (
            o.object_id,
            o.scene_ids,
            o.n_pixels,
            o.prob_mean,
            o.prob_max,
            o.area_m2,
            o.partial,
            o.size_bin,
            shapely.to_wkb(o.geometry),
        )
        for o in objects
    ]


@pytest.fixture(scope="module")
def scenes() -> list[SceneParts]:
    return [grid_scene(r, c, 10 * r + c + 1) for r in range(3) for c in range(3)]


def sha(sc: SceneParts) -> str:
    return f"sha-{sc.scene_id}"


def test_scenes_arriving_in_random_orders_give_the_full_merge(scenes: list[SceneParts], tmp_path: Path) -> None:
    want = rows(merge_parts(scenes)[1])
    assert len(want) > 20 and any(len(r[1]) > 1 for r in want)  # objects across seams
    for trial in range(2):
        order = list(range(len(scenes)))
        random.Random(trial).shuffle(order)
        state = tmp_path / f"state-{trial}.json"
        arrived: list[int] = []
        for batch in (order[:4], order[4:5], order[5:]):
            arrived += batch
            done = [scenes[i] for i in sorted(arrived)]  # the done scenes in the campaign's order
            crs, got, report = merge_incremental(done, [sha(s) for s in done], state)
            assert rows(got) == rows(merge_parts(done)[1]), (trial, arrived)
            assert crs == merge_parts(done)[0]
            assert report.added == len(batch)
        assert rows(got) == want


def test_remapped_and_dropped_scenes_and_an_overlap_give_the_full_merge(
    scenes: list[SceneParts], tmp_path: Path
) -> None:
    state = tmp_path / "state.npz"
    done = list(scenes)
    merge_incremental(done, [sha(s) for s in done], state)
    _, same, report = merge_incremental(done, [sha(s) for s in done], state)  # nothing new: nothing redone
    assert (report.full, report.added, report.removed, report.regrouped, report.retested) == (False, 0, 0, 0, 0)
    assert rows(same) == rows(merge_parts(done)[1])
    remapped = grid_scene(1, 1, 77)  # scene 4 re-mapped: other parts under its id
    done[4] = SceneParts(scenes[4].scene_id, remapped.crs, remapped.pixel_size, remapped.footprint, remapped.parts)
    shas = [sha(s) for s in done]
    shas[4] = "sha-remapped"
    _, got, report = merge_incremental(done, shas, state)
    assert (report.added, report.removed) == (1, 1) and 0 < report.regrouped < len(got)
    assert rows(got) == rows(merge_parts(done)[1])
    del done[7], shas[7]  # a scene no longer done: its objects and its footprint go
    _, got, report = merge_incremental(done, shas, state)
    assert (report.added, report.removed) == (0, 1) and report.retested > 0
    assert rows(got) == rows(merge_parts(done)[1])
    extra = grid_scene(1, 4, 5, overlap=N // 2)  # east of the grid, half over its east column
    done.append(extra)
    shas.append("sha-extra")
    _, got, report = merge_incremental(done, shas, state)
    assert report.added == 1 and rows(got) == rows(merge_parts(done)[1])


def test_a_state_that_cannot_be_built_on_is_a_full_merge(
    scenes: list[SceneParts], tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)  # `rts` may have stopped it
    state = tmp_path / "state.npz"
    some = scenes[:4]
    merge_incremental(some, [sha(s) for s in some], state)
    held = read_state(state)
    assert held is not None and [k[0] for k in held.scenes] == [s.scene_id for s in some]
    swapped = [some[1], some[0], *some[2:]]  # another order of the same scenes: ties and unions may differ
    _, got, report = merge_incremental(swapped, [sha(s) for s in swapped], state)
    assert report.full and rows(got) == rows(merge_parts(swapped)[1])
    state.write_text("{not json")
    with caplog.at_level("WARNING"):
        _, got, report = merge_incremental(some, [sha(s) for s in some], state)
    assert report.full and rows(got) == rows(merge_parts(some)[1])
    assert f"campaign merge state {state} unreadable" in caplog.text
    assert read_state(state) is not None  # rewritten whole
    data = state.read_bytes()
    state.write_bytes(data[: len(data) // 2])  # a torn copy
    with caplog.at_level("WARNING"):
        assert read_state(state) is None
    state.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])  # a flipped bit in the head
    assert read_state(state) is None
    assert caplog.text.count("unreadable") >= 3


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> float:
    """Blocks of 40 m: a scene of 96 m spans 3-4 of them, and objects fall in many."""
    from rtscore.mapping import merge_store

    monkeypatch.setattr(merge_store, "BLOCK_M", 40.0)
    return 40.0


def test_with_many_blocks_a_finish_rewrites_only_the_blocks_near_a_change(
    scenes: list[SceneParts], tmp_path: Path, small_blocks: float
) -> None:
    state = tmp_path / "merge-state"
    first = scenes[:6]  # the top two rows; the third arrives later
    _, got, report = merge_incremental(first, [sha(s) for s in first], state)
    assert rows(got) == rows(merge_parts(first)[1])
    assert report.blocks > 12 and report.blocks_written == report.blocks
    assert sorted(p.name for p in (tmp_path / "merge-state.blocks").iterdir()) == sorted(read_state(state).blocks)
    _, got, report = merge_incremental(scenes, [sha(s) for s in scenes], state)
    assert rows(got) == rows(merge_parts(scenes)[1])
    assert 0 < report.blocks_written < report.blocks  # the top row's blocks are not read as objects nor rewritten
    for trial in range(3):  # random arrivals, removals and re-maps over many blocks: always the full merge
        rng = random.Random(100 + trial)
        state = tmp_path / f"state-{trial}"
        held: list[int] = []
        for _ in range(4):
            held = sorted(set(held) | set(rng.sample(range(len(scenes)), 3)))
            if len(held) > 4 and rng.random() < 0.5:
                held.remove(rng.choice(held))
            done = [scenes[i] for i in held]
            _, got, _ = merge_incremental(done, [sha(s) for s in done], state)
            assert rows(got) == rows(merge_parts(done)[1]), (trial, held)


def test_a_finish_killed_between_its_blocks_and_its_head_or_a_damaged_block_is_a_full_merge(
    scenes: list[SceneParts],
    tmp_path: Path,
    small_blocks: float,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from rtscore.mapping import merge

    monkeypatch.setattr(logging.getLogger("rtscore"), "propagate", True)
    state = tmp_path / "merge-state"
    some = scenes[:5]
    merge_incremental(some, [sha(s) for s in some], state)

    def killed(path: Path, st: object) -> None:
        raise KeyboardInterrupt  # the blocks are written, the head is not

    with monkeypatch.context() as m:
        m.setattr(merge, "write_state", killed)
        with pytest.raises(KeyboardInterrupt):
            merge_incremental(scenes, [sha(s) for s in scenes], state)
    with caplog.at_level("WARNING"):
        _, got, report = merge_incremental(scenes, [sha(s) for s in scenes], state)
    assert report.full and rows(got) == rows(merge_parts(scenes)[1])
    assert "unreadable" in caplog.text and "CRC-32" in caplog.text
    caplog.clear()
    block = sorted((tmp_path / "merge-state.blocks").iterdir())[0]
    data = block.read_bytes()
    block.write_bytes(data[:-40] + bytes([data[-40] ^ 0x01]) + data[-39:])  # a flipped bit in a block
    done = scenes[:4] + scenes[5:]  # a scene no longer done
    with caplog.at_level("WARNING"):
        _, got, report = merge_incremental(done, [sha(s) for s in done], state)
    assert report.full and rows(got) == rows(merge_parts(done)[1])
    assert f"{block.name}" in caplog.text and "CRC-32" in caplog.text
