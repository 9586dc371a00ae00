"""The `rts` entry point: rtscore's commands plus the commands that run Prefect flows."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flows.params import TRAIN_SEED_DEPLOYMENT
from rtscore.cli import build_parser, package_verify_command, run
from rtscore.storage import absolute_location as absolute


def _quiet_ephemeral_prefect() -> None:
    """No telemetry from the temporary local server (offline machines; it also races SQLite at start-up)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _data(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.data import data_pipeline
    from flows.params import DataParams

    refs = data_pipeline(
        DataParams(config=str(Path(args.config).resolve()), run_dir=absolute(args.run), refresh=args.refresh)
    )
    for name, ref in refs.items():
        print(f"{name:20s} {ref.uri}")
    print(f"data pipeline finished; validation report: {absolute(args.run)}/validation/report.md")
    return 0


def _train(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.params import MultiSeedParams, TrainSeedParams
    from flows.train import multi_seed_train, train_seed

    config, run = str(Path(args.config).resolve()), absolute(args.run)
    if args.seeds:
        results = multi_seed_train(MultiSeedParams(config=config, run_dir=run, seeds=args.seeds, fresh=args.fresh))
    else:
        results = [train_seed(TrainSeedParams(config=config, run_dir=run, seed=args.seed, fresh=args.fresh))]
    for r in results:
        res = r.result
        print(
            f"seed {res.seed}: best val_realistic_pr_auc_geomean {res.best_metric:.4f} at epoch {res.best_epoch} "
            f"({res.epochs_run} epochs) -> {res.seed_dir}"
        )
    return 0


def _run_dir(args: argparse.Namespace) -> str:
    """--run (a local path, made absolute, or a gs:// URI kept as is), or artifacts/<config file stem>."""
    return absolute(args.run or str(Path("artifacts") / Path(args.config).stem))


def _print_training(results: list[Any]) -> None:
    for r in results:
        print(
            f"seed {r.result.seed:<6d} best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} "
            f"(epoch {r.result.best_epoch}) {r.result.seed_dir}"
        )


def _print_calibration(cal: Any) -> None:
    d = cal.deployment
    print(f"calibration: tta {d.tta}, scales {d.scales}; shipped seed {cal.shipped_seed}")
    print(f"  TTA gate:   {cal.tta_reason}")
    print(f"  scale gate: {cal.scales_reason}")
    for p in cal.seeds:
        note = "" if p.target_reached else " (target precision not reachable: max-F1 threshold)"
        print(
            f"  seed {p.seed}: T = {p.temperature:.3f}, threshold {p.threshold:.4f} "
            f"(val precision {p.precision:.3f}, recall {p.recall:.3f}){note}"
        )


def _pipeline(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.params import DistributedParams, PipelineParams
    from flows.pipeline import pipeline

    run_dir = _run_dir(args)
    out = pipeline(
        PipelineParams(
            config=str(Path(args.config).resolve()),
            run_dir=run_dir,
            seeds=args.seeds,
            refresh=args.refresh,
            skip_generation=args.skip_generation,
            deterministic=args.deterministic,
            execution=args.execution,
            distributed=DistributedParams(deployment=args.train_deployment),
        )
    )
    _print_training(out["training"])
    _print_calibration(out["calibration"])
    print()
    print(out["test"].table)
    print(f"\ntest report: {run_dir}/evaluation/test_report.md")
    print(f"deployment package: {out['package'].uri}")
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.calibrate import calibrate

    cal = calibrate(_stage_params(args))
    _print_calibration(cal)
    print(f"deployment config: {_run_dir(args)}/calibration/deployment_config.yaml")
    return 0


def _evaluate_test(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.calibrate import evaluate_test

    rep = evaluate_test(_stage_params(args))
    print(rep.table)
    print(f"\ntest report: {_run_dir(args)}/evaluation/test_report.md")
    return 0


def _package_build(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.calibrate import package

    ref = package(_stage_params(args))
    print(f"deployment package: {ref.uri}")
    return 0


def _stage_params(args: argparse.Namespace) -> Any:
    """The SeedStageParams of a stage command (calibrate, evaluate-test, package build)."""
    from flows.params import SeedStageParams

    return SeedStageParams(
        config=str(Path(args.config).resolve()), run_dir=_run_dir(args), seeds=args.seeds, refresh=args.refresh
    )


def _stage_args(p: argparse.ArgumentParser, *, seeds_help: str = "seeds (default: training.seeds)") -> None:
    p.add_argument("--config", required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)")
    p.add_argument("--run", help="run directory (default: artifacts/<config file name>)")
    p.add_argument("--seeds", type=int, nargs="+", help=seeds_help)
    p.add_argument("--refresh", action="store_true", help="recompute (ignore cached results)")


def parser() -> argparse.ArgumentParser:
    p, sub = build_parser()
    d = sub.add_parser("data", help="run the data-pipeline flow (generate -> stats -> validate) into a run dir")
    d.add_argument("--config", required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)")
    d.add_argument("--run", required=True, help="run directory, e.g. artifacts/quickstart")
    d.add_argument("--refresh", action="store_true", help="recompute every stage (ignore cached results)")
    d.set_defaults(func=_data)

    t = sub.add_parser("train", help="train one seed (train-seed flow) or several (multi-seed-train flow)")
    t.add_argument("--config", required=True, help="pipeline config YAML")
    t.add_argument("--run", required=True, help="run directory holding the data stages' outputs")
    t.add_argument("--seed", type=int, default=42, help="seed of a single-seed run (default 42)")
    t.add_argument("--seeds", type=int, nargs="+", help="train these seeds in sequence under one parent run")
    t.add_argument("--fresh", action="store_true", help="start over instead of resuming from resume_latest.pth")
    t.set_defaults(func=_train)

    q = sub.add_parser(
        "run",
        aliases=["pipeline"],
        help="the full pipeline: data -> training -> calibrate -> evaluate-test -> package",
    )
    _stage_args(q, seeds_help="override training.seeds")
    q.add_argument("--skip-generation", action="store_true", help="reuse the run's existing datasets")
    q.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="override training.deterministic of the config",
    )
    q.add_argument(
        "--execution",
        choices=("local", "distributed"),
        default="local",
        help="local: train the seeds in this process (default); distributed: one train-seed flow run per seed "
        "on --train-deployment (needs PREFECT_API_URL of a server with workers)",
    )
    q.add_argument(
        "--train-deployment",
        default=TRAIN_SEED_DEPLOYMENT,
        help=f"deployment of a distributed run's seeds (default {TRAIN_SEED_DEPLOYMENT})",
    )
    q.set_defaults(func=_pipeline)

    c = sub.add_parser("calibrate", help="logit caches, TTA/scale gates, temperature and threshold (calibrate flow)")
    _stage_args(c)
    c.set_defaults(func=_calibrate)

    e = sub.add_parser("evaluate-test", help="Test-Realistic with the frozen deployment config, mean ± std")
    _stage_args(e)
    e.set_defaults(func=_evaluate_test)

    k = sub.add_parser("package", help="build or verify the deployment package")
    ksub = k.add_subparsers(dest="package_command", required=True, metavar="{build,verify}")
    kb = ksub.add_parser("build", help="assemble <run>/package/ from the shipped seed (package flow)")
    _stage_args(kb, seeds_help="the calibrated seeds (default: training.seeds)")
    kb.set_defaults(func=_package_build)
    kv = ksub.add_parser("verify", help="audit a package without unpickling, then load it and run one tile")
    kv.add_argument("dir", help="package directory")
    kv.add_argument("--device", default="cpu", help="device for the one-tile forward pass (default cpu)")
    kv.set_defaults(func=package_verify_command)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
