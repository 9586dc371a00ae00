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


def parser() -> argparse.ArgumentParser:
    p, sub = build_parser()
    d = sub.add_parser("data", help="run the data-pipeline flow (generate -> stats -> validate) into a run dir")
    d.add_argument("--config", required=True, help="pipeline config YAML (e.g. configs/quickstart.yaml)")
    d.add_argument("--run", required=True, help="run directory, e.g. artifacts/quickstart")
    d.add_argument("--refresh", action="store_true", help="recompute every stage (ignore cached results)")
    d.set_defaults(func=_data)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    return run(parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
