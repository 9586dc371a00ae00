"""The pipeline commands of `rts` (data, train, run, calibrate, evaluate-test, package build): each takes its
flow's own parameter model (flows/params.py), checks it before any work and runs the flow (an ephemeral local
Prefect API unless PREFECT_API_URL names a server). The flows are imported on use, so `rts --help` stays instant.
"""

from __future__ import annotations

import os
from typing import Any, TypeVar

from flows.params import DataParams, MultiSeedParams, PipelineParams, RunParams, SeedStageParams, TrainParams
from rtscore.storage import RunLayout, absolute_location

P = TypeVar("P", bound=RunParams)


def _start_flow(params: P, first_stage: str) -> P:
    """Before a flow command runs its flow, in this order, each refusal one message (exit 2): its config and run
    location (a local one writable; gs://: credentials and bucket), without Prefect or torch (:mod:`flows.preflight`,
    a second or two), then the inputs of the first stage it runs (:func:`flows.common.check_inputs`); only then
    Prefect's API: no telemetry from the temporary local server (offline machines; it also races SQLite at
    start-up), and that server started up front (a generous start-up limit, stopped even when this process is
    killed: :func:`flows.common.start_local_api`) unless PREFECT_API_URL names a server.

    Returns the parameters with the run directory absolute (a gs:// URI kept as it is).
    """
    from flows.preflight import check_run

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
    for name, ref in refs.items():
        print(f"{name:20s} {ref.uri}")
    print(f"data pipeline finished; validation report: {params.run_dir}/{RunLayout.VALIDATION_REPORT_MD.at()}")
    return 0


def train(params: TrainParams) -> int:
    flow_params = _start_flow(params.flow_params(), "train-seed")
    from flows.train import multi_seed_train, train_seed

    results = multi_seed_train(flow_params) if isinstance(flow_params, MultiSeedParams) else [train_seed(flow_params)]
    for r in results:
        res = r.result
        print(
            f"seed {res.seed}: best val_realistic_pr_auc_geomean {res.best_metric:.4f} at epoch {res.best_epoch} "
            f"({res.epochs_run} epochs) -> {res.seed_dir}"
        )
    return 0


def _print_training(results: list[Any]) -> None:
    for r in results:
        print(
            f"seed {r.result.seed:<6d} best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} "
            f"(epoch {r.result.best_epoch}) {r.result.seed_dir}"
        )


def _print_calibration(cal: Any) -> None:
    d = cal.deployment
    print(f"calibration: tta {d.tta}, scales {d.scales}; shipped seed {cal.shipped_seed}")
    print(f"  TTA gate:   {cal.summary.tta_reason}")
    print(f"  scale gate: {cal.summary.scales_reason}")
    for p in cal.summary.seeds:
        note = "" if p.target_reached else " (WARNING: target precision not reachable: max-F1 fallback threshold)"
        print(
            f"  seed {p.seed}: T = {p.temperature:.3f}, threshold {p.threshold:.4f} "
            f"(val precision {p.precision:.3f}, recall {p.recall:.3f}){note}"
        )


def pipeline(params: PipelineParams) -> int:
    params = _start_flow(params, "generate-dataset")
    from flows.pipeline import pipeline as pipeline_flow

    out = pipeline_flow(params)
    _print_training(out["training"])
    _print_calibration(out["calibration"])
    print()
    print(out["test"].table)
    print(f"\ntest report: {params.run_dir}/{RunLayout.TEST_REPORT_MD.at()}")
    print(f"deployment package: {out['package'].uri}")
    return 0


def calibrate(params: SeedStageParams) -> int:
    params = _start_flow(params, "logit-cache")
    from flows.calibrate import calibrate as calibrate_flow

    _print_calibration(calibrate_flow(params))
    print(f"deployment config: {params.run_dir}/{RunLayout.DEPLOYMENT_CONFIG.at()}")
    return 0


def evaluate_test(params: SeedStageParams) -> int:
    params = _start_flow(params, "evaluate-test")
    from flows.calibrate import evaluate_test as evaluate_test_flow

    print(evaluate_test_flow(params).table)
    print(f"\ntest report: {params.run_dir}/{RunLayout.TEST_REPORT_MD.at()}")
    return 0


def package_build(params: SeedStageParams) -> int:
    params = _start_flow(params, "package")
    from flows.calibrate import package

    print(f"deployment package: {package(params).uri}")
    return 0
