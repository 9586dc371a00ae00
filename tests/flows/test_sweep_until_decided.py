"""--until-decided end to end (in process, a tiny sweep): an undecided variant gets the seeds the rule asks for, the
baseline trains them too, each variant's summary covers every seed, and the report says seeds were added."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from rtscore.sweep import run as sweep_run
from rtscore.sweep.verdict import Judgement, judge
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import quick_training


@pytest.mark.slow
def test_until_decided_adds_the_seeds_the_rule_asks_for(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.params.sweep import SweepParams
    from flows.sweep import sweep

    def undecided_below_three(
        baseline: Sequence[float], variant: Sequence[float], seeds: Sequence[int], **kw: Any
    ) -> Judgement:
        """The real rule's figures with a scripted verdict: undecided asking for 3 seeds below 3 paired seeds, decided
        from 3 on (tiny trainings are too alike for the real rule to ask for seeds deterministically)."""
        real = judge(baseline, variant, seeds, **kw)
        if len(seeds) < 3:
            return real.model_copy(update={"verdict": "undecided", "seeds_to_decide": 3})
        return real.model_copy(update={"verdict": "within noise", "seeds_to_decide": None})

    monkeypatch.setattr(sweep_run, "judge", undecided_below_three)
    base = write_config(tmp_path / "base.yaml", quick_training(tiny_training_config([1, 2])))
    file = tmp_path / "sweep.yaml"
    file.write_text(
        yaml.safe_dump(
            {
                "base": base.name,
                "variants": {"gamma1": {"loss.focal_gamma": 1.0}},
                "after_training": False,
                "until_decided": {"max_seeds": 4, "extra_seeds": [7, 8]},
            }
        )
    )
    out = tmp_path / "out"
    report = sweep(SweepParams(sweep=str(file), sweep_dir=str(out), until_decided=True))

    assert json.loads((out / "plan.json").read_text())["seeds"] == [1, 2, 7]
    assert not (out / "runner.json").exists(), "a finished run removes its record of itself"
    for v in ("baseline", "gamma1"):
        assert report.variant(v).seeds == [1, 2, 7]
        summary = json.loads((out / "variants" / v / "seeds" / "summary.json").read_text())
        assert [s["seed"] for s in summary["seeds"]] == [1, 2, 7], "the summary covers every seed, not the added ones"
    judgement = report.variant("gamma1").judgement
    assert judgement is not None and judgement.seeds == [1, 2, 7] and judgement.verdict == "within noise"
    assert any("--until-decided added seeds 7" in n for n in report.notes)
    assert not (out / "variants" / "baseline" / "seeds" / "seed_8").exists(), "no more than the rule asked for"
