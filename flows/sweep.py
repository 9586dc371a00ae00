"""The sweep flow (`rts sweep`): every variant of a sweep file trained over the same seeds, each judged against the
baseline within seed noise (rtscore.sweep), the chosen variant then calibrated, tested and packaged.

Order, each step resumable: the plan is made and checked before any work (a bad variant is refused naming it and
the key); the data stages run per variant in its own run directory, except those whose planned identity an earlier
variant has, which are adopted from it; every variant × seed trains (``execution: local``: in this run, as
multi-seed-train does; ``distributed``: one train-seed flow run each on the training deployment, all at once,
idempotently keyed by this flow run and re-submitted when crashed); the baseline's validation noise floor is measured
once; the report is written with the choice **before** anything reads the test split; only then the chosen variant
(and any named in the sweep file's ``test_variants``) runs calibrate -> evaluate-test -> package.

Killing a sweep and starting it again trains nothing twice: each stage run is cached on its key (a trained seed's
artifacts stay recorded; an interrupted one resumes from its checkpoint), and adoption skips what is in place.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import INPUTS, RUN_ID

from flows import ui
from flows.calibrate import package
from flows.common import flow_run_scope, load_config, run_namer, run_stage
from flows.failures import flow
from flows.fanout import TRAIN_SEED, Child, fan_out, read_recorded, train_child
from flows.params import PipelineParams, derived
from flows.params.sweep import SweepParams
from flows.pipeline import Distributed, Local
from flows.train import multi_seed_train
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import TrainResult, recorded_train_result, save_resolved_config
from rtscore.storage import RunDir, absolute_location
from rtscore.sweep.config import SweepConfig, load_sweep_config
from rtscore.sweep.liveness import sweep_running
from rtscore.sweep.noise import noise_floor
from rtscore.sweep.plan import DATA_STAGES, PlannedVariant, SweepPlan, plan_sweep
from rtscore.sweep.render import render_markdown, table_rows
from rtscore.sweep.report import NoiseFloor, SweepReport, TestFigure
from rtscore.sweep.run import REPORT_PNG, adopt_shared, build_report, write_plan, write_report
from rtscore.tracking import Tracker
from tasks import stages as st
from tasks import train as t


@flow(name="sweep", flow_run_name=run_namer("sweep", SweepParams, ("sweep",)))
def sweep(params: SweepParams) -> SweepReport:
    """Plan -> data per variant (shared stage runs adopted) -> every variant × seed trained -> noise floor -> verdicts
    and the choice (validation only) -> the chosen variant's calibrate, evaluate-test and package -> report. The
    plan refuses before anything is written; from then on the sweep directory's runner.json says this run is alive
    (rtscore.sweep.liveness: `rts sweep --status` tells a killed sweep from a running one)."""
    with flow_run_scope() as flow_run_id:
        sweep_cfg, base = load_sweep_config(params.sweep)
        plan = plan_sweep(sweep_cfg, base, absolute_location(params.sweep_dir))
        with sweep_running(plan.sweep_dir):
            report = _run_sweep(params, sweep_cfg, base, plan, flow_run_id)
        _publish(report)
        return report


def _run_sweep(
    params: SweepParams, sweep_cfg: SweepConfig, base: Path, plan: SweepPlan, flow_run_id: str | None
) -> SweepReport:
    """The sweep's work once planned: written plan, data, training, noise floor, report and choice, after-training."""
    write_plan(plan)
    cfgs = {v.name: load_config(_run_params(plan, v, params)) for v in plan.variants}
    sweep_run = _start_sweep_run(plan, cfgs[plan.baseline])
    for v in plan.variants:
        _data(plan, v, params, cfgs[v.name])
    _train(plan, params, cfgs, plan.seeds, plan.variants, sweep_run, flow_run_id)
    ratios = list(cfgs[plan.baseline].metrics.ratios)
    floor = _noise_floor(plan, cfgs[plan.baseline], plan.seeds[0])
    report = build_report(plan, sweep_cfg, ratios, floor, finished=True)
    added: list[int] = []
    while params.until_decided and (more := _more_seeds(report, plan, sweep_cfg)):
        plan = plan_sweep(sweep_cfg, base, plan.sweep_dir, seeds=[*plan.seeds, *more[0]])
        write_plan(plan)
        trained = [v for v in plan.variants if v.name in more[1]]
        # All of the plan's seeds: those trained are cached, and each variant's summary covers every seed.
        _train(plan, params, cfgs, plan.seeds, trained, sweep_run, flow_run_id)
        added += more[0]
        report = build_report(plan, sweep_cfg, ratios, floor, finished=True)
    if added:
        report.notes.append(
            f"--until-decided added seeds {', '.join(map(str, added))} to the undecided variants and the baseline: "
            f"judging again after adding seeds raises the false-positive rate above {1 - sweep_cfg.confidence:.0%} "
            "(about 11 % at 95 % from 3 seeds; docs/experiments.md): confirm a 'better' on fresh seeds, or set "
            "confidence: 0.975"
        )
    write_report(report)  # the choice is recorded before anything reads the test split
    _log_sweep_run(plan, cfgs[plan.baseline], sweep_run, report)
    if sweep_cfg.after_training and report.chosen is not None:
        for name in dict.fromkeys([report.chosen, *sweep_cfg.test_variants]):
            report.test[name] = _after_training(plan, plan.variant(name), params, flow_run_id, report)
            report.tested.append(name)
            write_report(report)
    return report


def _run_params(plan: SweepPlan, v: PlannedVariant, params: SweepParams) -> PipelineParams:
    """A variant's pipeline parameters: the base config with its overrides, its run directory, and what the sweep
    sets for every variant (the fields the sweep's parameters share with a pipeline's: deterministic, execution,
    distributed)."""
    return derived(PipelineParams, params, config=plan.base_config, overrides=v.overrides, run_dir=v.run_dir)


def _data(plan: SweepPlan, v: PlannedVariant, params: SweepParams, cfg: PipelineConfig) -> None:
    """The variant's data stages: those it shares adopted from the variant that computed them (which ran before it),
    the others run here, cached on their keys as in any run."""
    save_resolved_config(v.run_dir, cfg)
    adopt_task(plan, v.name)
    for stage in v.stages:
        if stage.stage in DATA_STAGES and stage.owner == v.name:
            selection: dict[str, Any] = dict(stage.params)
            run_stage(st.TASKS[stage.stage], v.run_dir, cfg, **selection)


@task(name="adopt-shared", task_run_name="adopt-shared-{variant}")
def _adopt(plan: SweepPlan, variant: str) -> list[str]:
    return adopt_shared(plan, variant)


def adopt_task(plan: SweepPlan, variant: str) -> list[str]:
    """Adopt the stage runs ``variant`` shares (a task: the UI shows what was taken from where)."""
    if not plan.variant(variant).shared():
        return []
    return _adopt(plan, variant)


def _train(
    plan: SweepPlan,
    params: SweepParams,
    cfgs: dict[str, PipelineConfig],
    seeds: list[int],
    variants: list[PlannedVariant],
    sweep_run: str | None,
    flow_run_id: str | None,
) -> None:
    """Train ``seeds`` of each of ``variants``: in this run one after another, or all at once on the GPU pool."""
    if params.execution == "local":
        for v in variants:
            multi = _run_params(plan, v, params).multi_seed()
            multi_seed_train(multi.model_copy(update={"seeds": seeds, "parent_run_id": sweep_run}))
        return
    if flow_run_id is None:
        raise RuntimeError("execution 'distributed' needs a Prefect flow run (its id keys the child runs)")
    start = t.start_multiseed.with_options(cache_policy=RUN_ID + INPUTS, persist_result=True)
    parents = {v.name: start(v.run_dir, cfgs[v.name], seeds, sweep_run, v.overrides) for v in variants}
    children = [_train_child(plan, v, s, parents[v.name], params) for v in variants for s in seeds]
    fan_out(TRAIN_SEED, params.distributed.deployment, flow_run_id, children, params.distributed, tags=["rts-sweep"])
    for v in variants:
        run = RunDir(v.run_dir)
        results: list[TrainResult] = [
            read_recorded(f"variant {v.name} seed {s}", partial(recorded_train_result, run, s)) for s in seeds
        ]
        t.finish_multiseed(v.run_dir, cfgs[v.name], parents[v.name], results)


def _train_child(plan: SweepPlan, v: PlannedVariant, seed: int, parent: str | None, params: SweepParams) -> Child:
    """A variant's seed as a distributed pipeline's train-seed child (its overrides, its run directory), keyed and
    named by the variant too."""
    child = train_child(_run_params(plan, v, params), seed, parent)
    return Child(f"{v.name}/{seed}", f"variant {v.name} seed {seed}", f"{child.run_name}-{v.name}", child.params)


@task(name="noise-floor", task_run_name="noise-floor-seed-{seed}")
def _noise_floor(plan: SweepPlan, cfg: PipelineConfig, seed: int) -> NoiseFloor:
    """The baseline's validation noise floor (measured once per checkpoint: rtscore.sweep.run.noise_floor)."""
    return noise_floor(plan, cfg, seed)


def _more_seeds(report: SweepReport, plan: SweepPlan, sweep_cfg: SweepConfig) -> tuple[list[int], set[str]] | None:
    """--until-decided: the seeds to add (to the undecided variants and the baseline), within the cap; None when
    every variant is decided or the cap is reached."""
    cap = sweep_cfg.until_decided.max_seeds
    undecided = [v for v in report.variants if v.judgement is not None and v.judgement.verdict == "undecided"]
    wanted = max((v.judgement.seeds_to_decide or 0 for v in undecided if v.judgement), default=0)
    target = min(wanted, cap)
    if not undecided or target <= len(plan.seeds):
        return None
    pool = sweep_cfg.until_decided.extra_seeds or list(range(max(plan.seeds) + 1, max(plan.seeds) + 1 + cap))
    new = [s for s in pool if s not in plan.seeds][: target - len(plan.seeds)]
    if not new:
        return None
    return new, {plan.baseline, *(v.name for v in undecided)}


def _after_training(
    plan: SweepPlan, v: PlannedVariant, params: SweepParams, flow_run_id: str | None, report: SweepReport
) -> dict[str, dict[str, TestFigure]]:
    """calibrate -> evaluate-test -> package for a variant (after the choice was recorded); its test figures."""
    p = _run_params(plan, v, params)
    seeds = report.variant(v.name).seeds
    gpu = Local(p) if params.execution == "local" else Distributed(p, f"{flow_run_id}/{v.name}")
    gpu.calibrate(seeds)
    test = gpu.evaluate_test(seeds)
    package(p.stage(seeds))
    return {
        tag: {m: TestFigure(mean=s.mean, std=s.std, text=s.text) for m, s in metrics.items() if "pr_auc" in m}
        for tag, metrics in test.report.aggregate.items()
    }


def _start_sweep_run(plan: SweepPlan, cfg: PipelineConfig) -> str | None:
    """The sweep's MLflow parent run (one per sweep directory: a re-run continues it); variants nest under it."""
    tracker = Tracker(cfg.mlflow, RunDir(plan.variant(plan.baseline).run_dir).root)
    name = f"sweep-{plan.name}"
    tags = {"rts.sweep_dir": plan.sweep_dir}  # a tracking server may hold sweeps of one name in other directories
    run_id = tracker.find_run(name, tags=tags) or tracker.start_run(name, tags=tags)
    tracker.log_params(run_id, {"metric": plan.metric, "baseline": plan.baseline, "variants": len(plan.variants)})
    return run_id


def _log_sweep_run(plan: SweepPlan, cfg: PipelineConfig, run_id: str | None, report: SweepReport) -> None:
    tracker = Tracker(cfg.mlflow, RunDir(plan.variant(plan.baseline).run_dir).root)
    for i, v in enumerate(report.variants):
        if v.metric is not None:
            tracker.log_metrics(run_id, {f"{v.name}.{plan.metric}_mean": v.metric.mean}, step=i)
    if report.chosen:
        tracker.log_params(run_id, {"chosen": report.chosen})


def _publish(report: SweepReport) -> None:
    """The sweep's table (variants × metric with ± and verdict) and its report with the PNG inlined."""
    ui.publish_table(f"sweep-{report.name}", table_rows(report), f"sweep {report.name}: {report.metric}")
    md = ui.inline_images(render_markdown(report, plot=REPORT_PNG), report.sweep_dir, "")
    ui.publish_markdown(f"sweep-{report.name}-report", md, f"sweep {report.name}")


__all__ = ["sweep"]
