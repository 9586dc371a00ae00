"""``rts sweep --status``: the table of a running or finished sweep, read from its directory (no work, no Prefect):
the finished report when there is one, else the plan with every seed recorded so far; whether a run of it is going on
is read from that run's record (:mod:`rtscore.sweep.liveness`), so a sweep killed with -9 reads as interrupted, with
how to resume it."""

from __future__ import annotations

import json
from pathlib import Path

from rtscore.config.pipeline import load_pipeline_config
from rtscore.storage import RunDir
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.liveness import Liveness, liveness, read_runner
from rtscore.sweep.plan import PLAN_NAME, SweepPlan
from rtscore.sweep.render import render_status
from rtscore.sweep.report import NoiseFloor, SweepReport
from rtscore.sweep.run import NOISE_FLOOR_NAME, build_report, read_report


def sweep_status(sweep_cfg: SweepConfig, base: Path, sweep_dir: str, resume: str = "") -> str:
    """The status table of the sweep in ``sweep_dir``; says so when it has not started. ``resume``: the command
    that starts it again, said when its run is not going on."""
    sweep = RunDir(sweep_dir)
    if sweep.fetch(PLAN_NAME) is None:
        return f"sweep {sweep_cfg.name}: not started in {sweep.uri} (no {PLAN_NAME})"
    plan = SweepPlan.model_validate_json(sweep.path(PLAN_NAME).read_text())
    live = liveness(read_runner(sweep))
    done = read_report(sweep_dir)
    if done is not None and done.status == "finished" and _complete(done, plan):
        return render_status(done) + _after_choice(live, resume)
    floor = None
    if sweep.fetch(NOISE_FLOOR_NAME) is not None:
        floor = NoiseFloor.model_validate(json.loads(sweep.path(NOISE_FLOOR_NAME).read_text())["noise_floor"])
    ratios = list(load_pipeline_config(base).metrics.ratios)
    report = build_report(plan, sweep_cfg, ratios, floor, finished=False)
    if live.state == "running":
        return render_status(report) + f"\nrun: {live.detail}\n"
    return render_status(report, state=live.state) + f"\n{live.state}: {live.detail}\n{_resume(resume)}\n"


def _resume(command: str) -> str:
    how = f"{command} (with the options it was started with)" if command else "start it again as it was started"
    return f"resume: {how}; the seeds trained are kept and an interrupted seed resumes from its last checkpoint"


def _after_choice(live: Liveness, resume: str) -> str:
    """A finished report whose run is still going on (the after-training stages), or ended before they did."""
    if live.state == "stopped":
        return ""
    if live.state == "running":
        return f"\nthe choice is made; its run goes on (calibrate, evaluate-test, package): {live.detail}\n"
    return (
        f"\nthe choice is made, but its run was {live.state} before the after-training stages (calibrate, "
        f"evaluate-test, package) finished: {live.detail}\n{_resume(resume)}\n"
    )


def _complete(report: SweepReport, plan: SweepPlan) -> bool:
    return all(set(v.seeds) >= set(plan.seeds) for v in report.variants if v.baseline)


__all__ = ["sweep_status"]
