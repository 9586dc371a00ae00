"""--until-decided: which seeds a sweep adds, to which variants, and where it stops (the cap, the decided)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.sweep import _more_seeds
from rtscore.config.base import parse_config
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import SweepPlan, plan_sweep
from rtscore.sweep.report import Spread, SweepReport, VariantReport
from rtscore.sweep.verdict import Judgement
from tests.flows.configs import tiny_training_config, write_config


def _judgement(verdict: str, n: int, to_decide: int | None = None) -> Judgement:
    return Judgement(
        seeds=list(range(1, n + 1)),
        mean_diff=0.03,
        std_diff=0.02,
        ci_low=-0.01,
        ci_high=0.07,
        confidence=0.95,
        margin=0.0,
        verdict=verdict,  # type: ignore[arg-type]
        seeds_to_decide=to_decide,
        reason="test",
    )


def _setup(tmp_path: Path, **until: object) -> tuple[SweepConfig, SweepPlan]:
    base = write_config(tmp_path / "base.yaml", tiny_training_config([1, 2, 3]))
    variants = {"a": {"loss.focal_gamma": 1.0}, "b": {"loss.focal_gamma": 3.0}}
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": variants, "until_decided": until or {}})
    return sweep, plan_sweep(sweep, base, str(tmp_path / "sweep"))


def _report(plan: SweepPlan, a: Judgement | None, b: Judgement | None) -> SweepReport:
    spread = Spread(mean=0.5, std=0.01, values={s: 0.5 for s in plan.seeds})
    variants = [
        VariantReport(
            name=v.name,
            overrides=v.overrides,
            baseline=v.name == plan.baseline,
            run_dir=v.run_dir,
            seeds=plan.seeds,
            metric=spread,
            judgement=j,
        )
        for v, j in zip(plan.variants, (None, a, b), strict=True)
    ]
    return SweepReport(
        name="s",
        sweep_dir=plan.sweep_dir,
        base_config=plan.base_config,
        metric=plan.metric,
        confidence=0.95,
        margin=0.0,
        status="finished",
        variants=variants,
    )


def test_seeds_are_added_to_the_undecided_variants_and_the_baseline(tmp_path: Path) -> None:
    sweep, plan = _setup(tmp_path)
    more = _more_seeds(_report(plan, _judgement("undecided", 3, 6), _judgement("better", 3)), plan, sweep)
    assert more == ([4, 5, 6], {"baseline", "a"}), "3 seeds to reach the 6 the rule asks for; b is decided"


def test_the_cap_limits_what_is_added_and_then_stops(tmp_path: Path) -> None:
    sweep, plan = _setup(tmp_path, max_seeds=5)
    more = _more_seeds(_report(plan, _judgement("undecided", 3, 9), None), plan, sweep)
    assert more == ([4, 5], {"baseline", "a"})
    capped = plan_sweep(sweep, Path(plan.base_config), plan.sweep_dir, seeds=[1, 2, 3, 4, 5])
    assert _more_seeds(_report(capped, _judgement("undecided", 5, 9), None), capped, sweep) is None


def test_nothing_is_added_when_every_variant_is_decided(tmp_path: Path) -> None:
    sweep, plan = _setup(tmp_path)
    report = _report(plan, _judgement("within noise", 3), _judgement("worse", 3))
    assert _more_seeds(report, plan, sweep) is None


@pytest.mark.parametrize("extra", [[10, 11, 12], [2, 10, 11, 12]])
def test_the_sweep_files_extra_seeds_are_taken_in_order(tmp_path: Path, extra: list[int]) -> None:
    sweep, plan = _setup(tmp_path, extra_seeds=extra)
    more = _more_seeds(_report(plan, _judgement("undecided", 3, 5), None), plan, sweep)
    assert more is not None and more[0] == [10, 11], "seeds already trained are skipped"
