"""``rts sweep --status``: the table of a running or finished sweep, read from its directory (no work, no Prefect):
the finished report when there is one, else the plan with every seed recorded so far."""

from __future__ import annotations

import json
from pathlib import Path

from rtscore.config.pipeline import load_pipeline_config
from rtscore.storage import RunDir
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import PLAN_NAME, SweepPlan
from rtscore.sweep.render import render_status
from rtscore.sweep.report import NoiseFloor, SweepReport
from rtscore.sweep.run import NOISE_FLOOR_NAME, build_report, read_report


def sweep_status(sweep_cfg: SweepConfig, base: Path, sweep_dir: str) -> str:
    """The status table of the sweep in ``sweep_dir``; says so when it has not started."""
    sweep = RunDir(sweep_dir)
    if sweep.fetch(PLAN_NAME) is None:
        return f"sweep {sweep_cfg.name}: not started in {sweep.uri} (no {PLAN_NAME})"
    plan = SweepPlan.model_validate_json(sweep.path(PLAN_NAME).read_text())
    done = read_report(sweep_dir)
    if done is not None and done.status == "finished" and _complete(done, plan):
        return render_status(done)
    floor = None
    if sweep.fetch(NOISE_FLOOR_NAME) is not None:
        floor = NoiseFloor.model_validate(json.loads(sweep.path(NOISE_FLOOR_NAME).read_text())["noise_floor"])
    ratios = list(load_pipeline_config(base).metrics.ratios)
    return render_status(build_report(plan, sweep_cfg, ratios, floor, finished=False))


def _complete(report: SweepReport, plan: SweepPlan) -> bool:
    return all(set(v.seeds) >= set(plan.seeds) for v in report.variants if v.baseline)


__all__ = ["sweep_status"]
