"""The pipeline commands of `rts` (data, train, run, calibrate, evaluate-test, package build): each takes its
flow's own parameter model (flows/params/), checks it before any work and runs the flow (an ephemeral local
Prefect API unless PREFECT_API_URL names a server). The flows are imported on use, so `rts --help` stays instant.
"""

from __future__ import annotations

import os
from typing import TypeVar

from flows.params import DataParams, MultiSeedParams, PipelineParams, RunParams, SeedStageParams, TrainParams
from flows.params.sweep import SweepCommandParams
from rtscore.storage import RunLayout, absolute_location

P = TypeVar("P", bound=RunParams)


def _start_flow(params: P, first_stage: str) -> P:
    """Before a flow command runs its flow, in this order, each refusal one message (exit 2): its config and run
    location (a local one writable; gs://: credentials and bucket), without Prefect or torch
    (:mod:`flows.cli.preflight`, a second or two), then the inputs of the first stage it runs
    (:func:`flows.common.check_inputs`); only then Prefect's API: no telemetry from the temporary local server (offline
    machines; it also races SQLite at start-up), and that server started up front (a generous start-up limit, stopped
    even when this process is killed: :func:`flows.common.start_local_api`) unless PREFECT_API_URL names a server.

    Returns the parameters with the run directory absolute (a gs:// URI kept as it is).
    """
    from flows.cli.preflight import check_run

    params = params.model_copy(update={"run_dir": absolute_location(params.run_dir)})
    check_run(params)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.common import check_inputs, start_local_api

    check_inputs(first_stage, params)
    start_local_api()
    return params


def data(params: DataParams) -> int:
    params = _start_flow(params, "generate-dataset")
    from flows.data import data_pipeline

    refs = data_pipeline(params)
    for name, ref in refs.named().items():
        print(f"{name:20s} {ref.uri}")
    print(f"data pipeline finished; validation report: {params.run_dir}/{RunLayout.VALIDATION_REPORT_MD.at()}")
    return 0


def train(params: TrainParams) -> int:
    flow_params = _start_flow(params.flow_params(), "train-seed")
    from flows.render import render_training
    from flows.train import multi_seed_train, train_seed

    results = multi_seed_train(flow_params) if isinstance(flow_params, MultiSeedParams) else [train_seed(flow_params)]
    print(render_training(results))
    return 0


def pipeline(params: PipelineParams) -> int:
    params = _start_flow(params, "generate-dataset")
    from flows.pipeline import pipeline as pipeline_flow
    from flows.render import render_calibration, render_training

    out = pipeline_flow(params)
    print(render_training(out.training))
    print(render_calibration(out.calibration))
    print()
    print(out.test.table)
    print(f"\ntest report: {params.run_dir}/{RunLayout.TEST_REPORT_MD.at()}")
    print(f"test objects (found by which seeds): {params.run_dir}/{RunLayout.TEST_OBJECTS.at()}")
    print(f"deployment package: {out.package.uri}")
    return 0


def calibrate(params: SeedStageParams) -> int:
    params = _start_flow(params, "logit-cache")
    from flows.calibrate import calibrate as calibrate_flow
    from flows.render import render_calibration

    print(render_calibration(calibrate_flow(params)))
    print(f"deployment config: {params.run_dir}/{RunLayout.DEPLOYMENT_CONFIG.at()}")
    return 0


def evaluate_test(params: SeedStageParams) -> int:
    params = _start_flow(params, "evaluate-test")
    from flows.calibrate import evaluate_test as evaluate_test_flow

    print(evaluate_test_flow(params).table)
    print(f"\ntest report: {params.run_dir}/{RunLayout.TEST_REPORT_MD.at()}")
    print(f"test objects (found by which seeds): {params.run_dir}/{RunLayout.TEST_OBJECTS.at()}")
    return 0


def package_build(params: SeedStageParams) -> int:
    params = _start_flow(params, "package")
    from flows.calibrate import package

    print(f"deployment package: {package(params).uri}")
    return 0


def sweep(params: SweepCommandParams) -> int:
    """`rts sweep FILE`: plan and check the sweep (every variant's config, the refusals) before Prefect starts, then
    run the sweep flow; `--status` prints the table of a running or finished sweep and exits."""
    from rtscore.sweep.config import load_sweep_config
    from rtscore.sweep.plan import plan_sweep

    params = params.model_copy(update={"sweep_dir": absolute_location(params.sweep_dir)})
    sweep_cfg, base = load_sweep_config(params.sweep)
    if params.status:
        from rtscore.sweep.status import sweep_status

        print(
            sweep_status(sweep_cfg, base, params.sweep_dir, resume=f"rts sweep {params.sweep} --dir {params.sweep_dir}")
        )
        return 0
    plan = plan_sweep(sweep_cfg, base, params.sweep_dir)  # every refusal before any work
    from flows.cli.preflight import check_run

    for v in plan.variants:
        check_run(
            PipelineParams(
                config=plan.base_config, overrides=v.overrides, run_dir=v.run_dir, execution=params.execution
            )
        )
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.common import start_local_api

    start_local_api()
    from flows.sweep import sweep as sweep_flow
    from rtscore.sweep.render import render_status
    from rtscore.sweep.run import REPORT_MD

    report = sweep_flow(params.flow_params())
    print(render_status(report))
    print(f"\nsweep report: {params.sweep_dir}/{REPORT_MD}")
    return 0
