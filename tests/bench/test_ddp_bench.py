"""bench/ddp_bench.py (issue 25): one seed on 2 gloo ranks against 1, side by side."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ddp_bench import main, summarize


def test_the_summary_gives_medians_ranges_and_the_ratio_of_the_medians() -> None:
    rounds = {
        "1 rank x 2 threads": [{"samples": [32, 32], "epoch_s": [1.0, 1.0], "val_s": 2.0}] * 2
        + [{"samples": [32, 32], "epoch_s": [2.0, 2.0], "val_s": 4.0}],
        "2 ranks x 1 thread": [{"samples": [32, 32], "epoch_s": [2.0, 2.0], "val_s": 3.0}] * 3,
    }
    s = summarize(rounds)
    one, two = s["1 rank x 2 threads"], s["2 ranks x 1 thread"]
    assert one["train_img_per_s"] == {"median": 32.0, "min": 16.0, "max": 32.0}
    assert two["train_img_per_s"]["median"] == 16.0 and s["ratio_train_img_per_s"] == 0.5
    assert s["ratio_val_s"] == 1.5


@pytest.mark.slow
def test_a_quick_run_launches_both_set_ups_and_prints_the_ratio(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import sys

    out = tmp_path / "ddp.json"
    # the smallest set-up the script allows: --quick sizes (one round, one timed epoch) of one global batch per epoch
    argv = ["ddp_bench.py", "--quick", "--steps", "1", "--json", str(out), "--workdir", str(tmp_path / "w")]
    monkeypatch.setattr(sys, "argv", argv)
    assert main() == 0
    summary = json.loads(out.read_text())
    assert summary["settings"]["config"] == "quickstart.yaml" and summary["settings"]["channels"] == 4
    for name in ("1 rank x 2 threads", "2 ranks x 1 thread"):
        assert summary[name]["train_img_per_s"]["median"] > 0 and summary[name]["val_s"]["median"] > 0
    assert summary["ratio_train_img_per_s"] > 0 and "scaling efficiency" in capsys.readouterr().out
