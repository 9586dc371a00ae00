"""bench/sweep_bench.py (issue 24): the split of a sweep's wall time into training and the rest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench.sweep_bench import PARTS, breakdown, epoch_seconds, spread


def _flow(id_: str, flow: str, start: float, end: float, parent_task: str | None = None) -> dict[str, Any]:
    return {"id": id_, "flow": flow, "name": id_, "start": start, "end": end, "parent_task_run_id": parent_task}


def _task(id_: str, name: str, flow_run: str, start: float, end: float) -> dict[str, Any]:
    return {"id": id_, "name": name, "flow_run_id": flow_run, "start": start, "end": end, "state": "COMPLETED"}


def test_breakdown_counts_leaf_task_runs_and_subflows_once_and_the_parts_add_up_to_the_wall() -> None:
    # a sweep flow run 5 s after the command started, 1 s before it ended (wall 106 s)
    flows = [
        _flow("sweep", "sweep", 5, 105),
        _flow("ms-a", "multi-seed-train", 20, 60, parent_task="wrap-ms-a"),
        _flow("cal", "calibrate", 70, 80, parent_task="wrap-cal"),
        _flow("test", "evaluate-test", 80, 85, parent_task="wrap-test"),
        _flow("pkg", "package", 85, 88, parent_task="wrap-pkg"),
    ]
    tasks = [
        _task("g1", "generate-dataset-train", "sweep", 6, 10),
        _task("g2", "generate-dataset-val", "sweep", 10, 12),
        _task("s", "normalization-stats", "sweep", 12, 13),
        _task("v", "validate-data", "sweep", 13, 14),
        _task("ad", "adopt-shared-gamma_1", "sweep", 14, 14.5),
        _task("wrap-ms-a", "multi-seed-train", "sweep", 19, 61),  # a subflow's wrapper: its subflow run counts
        _task("st", "start-multi-seed", "ms-a", 20, 21),
        _task("t42", "train-seed-42", "ms-a", 21, 40),
        _task("t43", "train-seed-43", "ms-a", 40, 59),
        _task("nf", "noise-floor-seed-42", "sweep", 62, 66),
        _task("wrap-cal", "calibrate", "sweep", 69, 81),
        _task("lc", "logit-cache-42", "cal", 70, 75),
        _task("wrap-test", "evaluate-test", "sweep", 80, 85),
        _task("wrap-pkg", "package", "sweep", 85, 88),
    ]
    b = breakdown({"flow_runs": flows, "task_runs": tasks}, wall=106.0)
    assert b["training"] == pytest.approx(38.0) and b["train_runs"] == 2
    parts = b["parts"]
    assert set(parts) == set(PARTS)
    assert parts["data"] == pytest.approx(4 + 2 + 1 + 1)
    assert parts["after_training"] == pytest.approx(10 + 5 + 3)  # the subflow runs, not their wrapper task runs
    assert parts["noise_floor"] == pytest.approx(4.0) and parts["adopt"] == pytest.approx(0.5)
    assert parts["multi_seed_bookkeeping"] == pytest.approx(40 - 38)
    assert parts["outside_flow_run"] == pytest.approx(6.0)
    assert parts["sweep_flow"] == pytest.approx(100 - 38 - 8 - 18 - 4 - 0.5 - 2)
    assert b["training"] + sum(parts.values()) == pytest.approx(b["wall"])
    assert b["overhead"] == pytest.approx(106 - 38)
    assert b["machinery"] == pytest.approx(106 - 38 - 8 - 18 - 6)  # not what one rts run pays as well
    assert b["ratio_all"] == pytest.approx(68 / 38) and b["ratio_machinery"] == pytest.approx(36 / 38)


def test_breakdown_refuses_runs_without_exactly_one_sweep_flow_run() -> None:
    with pytest.raises(ValueError, match="one sweep flow run"):
        breakdown({"flow_runs": [], "task_runs": []}, wall=1.0)


def test_epoch_seconds_sums_every_variants_seeds_epochs(tmp_path: Path) -> None:
    for variant, seed, secs in (("baseline", 42, [1.5, 2.0]), ("gamma_1", 43, [3.0])):
        d = tmp_path / "variants" / variant / "seeds" / f"seed_{seed}"
        d.mkdir(parents=True)
        rows = [{"epoch": i + 1, "epoch_seconds": s} for i, s in enumerate(secs)]
        (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "\n")
    assert epoch_seconds(tmp_path) == pytest.approx(6.5)
    assert spread([3.0, 1.0, 2.0]) == "2.0 [1.0-3.0]"
