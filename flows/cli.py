"""The `rts` entry point: rtscore's commands plus the commands that run Prefect flows."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rtscore.cli import build_parser, run


def _quiet_ephemeral_prefect() -> None:
    """No telemetry from the temporary local server (offline machines; it also races SQLite at start-up)."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def _data(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.data import data_pipeline

    refs = data_pipeline(
        config=str(Path(args.config).resolve()), run_dir=str(Path(args.run).resolve()), refresh=args.refresh
    )
    for name, ref in refs.items():
        print(f"{name:20s} {ref.uri}")
    print(f"data pipeline finished; validation report: {Path(args.run) / 'validation' / 'report.md'}")
    return 0


def _train(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.train import multi_seed_train, train_seed

    config, run = str(Path(args.config).resolve()), str(Path(args.run).resolve())
    if args.seeds:
        results = multi_seed_train(config=config, run_dir=run, seeds=args.seeds, fresh=args.fresh)
    else:
        results = [train_seed(config=config, run_dir=run, seed=args.seed, fresh=args.fresh)]
    for r in results:
        res = r.result
        print(
            f"seed {res.seed}: best val_realistic_pr_auc_geomean {res.best_metric:.4f} at epoch {res.best_epoch} "
            f"({res.epochs_run} epochs) -> {res.seed_dir}"
        )
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    _quiet_ephemeral_prefect()
    from flows.pipeline import pipeline

    refs = pipeline(
        config=str(Path(args.config).resolve()),
        run_dir=str(Path(args.run).resolve()),
        seeds=args.seeds,
        refresh=args.refresh,
    )
    for name, ref in refs.items():
        if isinstance(ref, list):
            for r in ref:
                print(
                    f"seed {r.result.seed:<15d} best val_realistic_pr_auc_geomean {r.result.best_metric:.4f} "
                    f"(epoch {r.result.best_epoch}) {r.result.seed_dir}"
                )
        else:
            print(f"{name:20s} {ref.uri}")
    print(f"pipeline finished: {Path(args.run)}")
    return 0


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

    q = sub.add_parser("pipeline", help="the full pipeline flow (data stages, then multi-seed training)")
    q.add_argument("--config", required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)")
    q.add_argument("--run", required=True, help="run directory, e.g. artifacts/quickstart")
    q.add_argument("--seeds", type=int, nargs="+", help="override training.seeds")
    q.add_argument("--refresh", action="store_true", help="recompute every stage (ignore cached results)")
    q.set_defaults(func=_pipeline)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
