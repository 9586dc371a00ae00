"""bench/train_bench.py (issue 25): the CPU-path section (d): compile, channels_last, threads vs workers, validation."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.train_bench import break_even_steps, cpu_variants, soundness, spread, val_frequency_costs

ROOT = Path(__file__).resolve().parents[2]


def test_variants_on_two_cores_are_the_default_its_repeat_and_one_factor_changed_at_a_time() -> None:
    vs = {v.name: v for v in cpu_variants(2, compile_=True)}
    assert next(iter(vs)) == "default"
    d = vs["default"]
    assert (d.compile, d.channels_last, d.threads, d.workers) == (False, True, 2, 0)  # quickstart as it stands
    assert vs["default_repeat"].repeat_of == "default" and vs["compile_repeat"].repeat_of == "compile"
    assert (vs["t1_w1"].threads, vs["t1_w1"].workers) == (1, 1)
    assert (vs["t2_w1"].threads, vs["t2_w1"].workers) == (2, 1)
    assert not vs["nchw"].channels_last and vs["compile"].compile
    assert "compile" not in {v.name for v in cpu_variants(2, compile_=False)}
    assert "t0_w1" not in {v.name for v in cpu_variants(1, compile_=False)}  # no zero-thread variant on 1 core


def test_break_even_is_compile_time_over_the_per_step_gain_and_never_without_a_gain() -> None:
    assert break_even_steps(60.0, 0.30, 0.20) == pytest.approx(600.0)
    assert math.isinf(break_even_steps(60.0, 0.20, 0.25))
    assert math.isinf(break_even_steps(60.0, 0.20, 0.20))


def test_val_frequency_costs_count_the_validations_run_epoch_makes_including_the_last_epoch() -> None:
    costs = val_frequency_costs([8] * 3 + [12] * 9, step_s=0.5, val_s=4.0)
    assert {f: c["validations"] for f, c in costs.items()} == {2: 6, 3: 4, 4: 3}
    assert costs[2]["train_s"] == pytest.approx(0.5 * 132)
    assert costs[4]["total_s"] == pytest.approx(66.0 + 12.0)
    assert val_frequency_costs([8] * 10, 1.0, 1.0, (4,))[4]["validations"] == 3  # 4, 8 and the last (10)


def test_soundness_wants_a_close_finite_loss_and_a_bit_identical_repeat() -> None:
    assert soundness(0.101, 0.100, True) == (True, "ok")
    assert soundness(0.101, 0.100, None)[0]  # no repeat run: not judged on determinism
    assert not soundness(0.110, 0.100, True)[0]
    assert not soundness(math.nan, 0.100, True)[0]
    ok, why = soundness(0.100, 0.100, False)
    assert not ok and "differ" in why


def test_spread_is_median_and_range() -> None:
    assert spread([3.0, 1.0, 2.0, 10.0]) == {"median": 2.5, "min": 1.0, "max": 10.0}


def _run_quick(*extra: str) -> dict:
    """The script as a user runs it, on the smallest set-up it allows: --quick sizes, one step per timed epoch
    (``--cpu-steps 1``; the quick default is 2), one round (the quick default)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "bench" / "train_bench.py"), "--quick", "--sections", "cpu", "--cpu-steps", "1"]
    cmd += extra
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "(d) the CPU path" in out and "fastest numerically sound setting" in out
    return json.loads(out.strip().splitlines()[-1])["cpu_path"]


def _check(d: dict, names: set[str]) -> None:
    assert set(d["variants"]) == names
    default = d["variants"]["default"]
    assert default["ratio_vs_default"]["median"] == pytest.approx(1.0)
    # the same code on the same machine: two runs are bit-identical
    assert default["deterministic"] is True and d["variants"]["default_repeat"]["identical_to_default"]
    # the loader's worker count does not change which batches are drawn or how they are augmented
    assert d["variants"]["t2_w1"]["identical_to_default"]
    assert d["fastest_sound"] in d["variants"]
    v = d["validation"]
    assert v["val_pass_s"]["median"] > 0 and v["real_epoch_s"]["median"] > 0
    assert set(v["per_frequency"]) == {"2", "3", "4"}


@pytest.mark.slow  # a bench smoke run: ~30 s on 2 busy cores (data, six training set-ups, a real epoch twice)
def test_quick_run_without_compile_measures_every_eager_variant() -> None:
    d = _run_quick("--no-compile")
    _check(d, {"default", "default_repeat", "nchw", "t1_w1", "t2_w1"})
    assert "compile" not in d
