"""Sweep overhead: everything but the trainings themselves, against the summed training time (issue 24).

What users run: ``python -m flows.cli.main sweep configs/sweeps/quickstart.yaml --dir <fresh dir>`` (the
quickstart-sized sweep: the baseline and 2 loss variants x 2 seeds, then calibrate -> evaluate-test -> package of the
chosen variant), as a subprocess with its own ``PREFECT_HOME`` (its own Prefect database: no cached task result of one
repetition can serve the next; ``PREFECT_API_URL`` unset, so the command starts its temporary local server as users'
does), each repetition in a fresh temporary sweep directory, ``--repeats`` times one after the other.

Per repetition:

- wall: the command's wall time (interpreter start to exit);
- training: the sum over variant x seed of the ``train-seed-<seed>`` task runs' durations (end - start of the task
  run as Prefect recorded it, read after the command ended from that repetition's Prefect database through the Prefect
  client, in a fresh process with the same ``PREFECT_HOME``). That is the training stage itself, all of it: the
  loop's epochs plus what the stage does around them (datasets opened, model built, checkpoints and metrics recorded,
  MLflow); the sum of the seeds' ``epoch_seconds`` (``seeds/seed_<n>/metrics.jsonl``) is printed beside it, the
  epochs alone. ``attempts.json`` has only a start time to the second and no end: not used;
- the rest of the wall time, broken down (the parts add up to the wall):
    data: the data stages (generate-dataset, normalization-stats, validate-data task runs), computed once (the
        variants adopt them);
    after-training: the calibrate, evaluate-test and package subflow runs of the chosen variant;
    noise floor: the baseline's validation noise floor (guide §10.1), once;
    adopt: the variants' adoption of the shared stage runs;
    multi-seed bookkeeping: each variant's multi-seed-train subflow run less its train-seed tasks (its parent MLflow
        run, mean +- std, the training table);
    sweep flow: the sweep flow run less all the above (plan, the variants' configs, the MLflow parent run, verdicts,
        reports, Prefect's orchestration of tasks and subflows);
    outside the flow run: the wall time before the sweep flow run starts and after it ends (interpreter, imports,
        the plan's checks before Prefect, the temporary server's start and stop).

Printed per repetition and as median [min-max]: wall, training, overhead = wall - training, and two ratios:
(a) overhead / training: everything but the trainings (the issue's definition), data and after-training included;
(b) the sweep's own machinery / training: (a) less what a single ``rts run`` of the chosen config pays as well (the
process and Prefect's temporary server, the data stages once, the after-training stages once): the noise floor,
adoption, the variants' multi-seed bookkeeping and the sweep flow's own work (plan, reports, verdicts, MLflow).

    .venv/bin/python bench/sweep_bench.py              # 3 repetitions; ~10-15 min each on 2 CPU cores
    .venv/bin/python bench/sweep_bench.py --repeats 1  # one repetition
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SWEEP = ROOT / "configs" / "sweeps" / "quickstart.yaml"
TRAIN_TASK = "train-seed"
DATA_TASKS = ("generate-dataset", "normalization-stats", "validate-data")
AFTER_FLOWS = ("calibrate", "evaluate-test", "package")
MULTI_SEED_FLOW = "multi-seed-train"
SWEEP_FLOW = "sweep"
TARGET = 0.05
STARTUP_TIMEOUT_ENV = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"  # as flows.common (not imported: Prefect)
PARTS = (
    "data",
    "after_training",
    "noise_floor",
    "adopt",
    "multi_seed_bookkeeping",
    "sweep_flow",
    "outside_flow_run",
)


def log(msg: str) -> None:
    print(msg, flush=True)


# ----------------------------------------------------------------------------------------------- reading Prefect
def _ts(value: Any) -> float | None:
    return None if value is None else float(value.timestamp())


def read_prefect(out: Path) -> None:
    """Write every flow run and task run of this process's Prefect database (``PREFECT_HOME``) to ``out`` as JSON:
    flow runs {id, flow, name, start, end, parent_task_run_id}, task runs {id, name, flow_run_id, start, end, state}
    (times: Unix seconds)."""
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        flow_names = {str(f.id): f.name for f in client.read_flows(limit=200)}
        flows: list[dict[str, Any]] = []
        tasks: list[dict[str, Any]] = []
        offset = 0
        while batch := client.read_flow_runs(limit=200, offset=offset):
            flows += [
                {
                    "id": str(r.id),
                    "flow": flow_names.get(str(r.flow_id), "?"),
                    "name": r.name,
                    "start": _ts(r.start_time),
                    "end": _ts(r.end_time),
                    "parent_task_run_id": str(r.parent_task_run_id) if r.parent_task_run_id else None,
                    "state": r.state_type.value if r.state_type else None,
                }
                for r in batch
            ]
            offset += len(batch)
        offset = 0
        while tbatch := client.read_task_runs(limit=200, offset=offset):
            tasks += [
                {
                    "id": str(r.id),
                    "name": r.name,
                    "flow_run_id": str(r.flow_run_id) if r.flow_run_id else None,
                    "start": _ts(r.start_time),
                    "end": _ts(r.end_time),
                    "state": r.state_type.value if r.state_type else None,
                }
                for r in tbatch
            ]
            offset += len(tbatch)
    out.write_text(json.dumps({"flow_runs": flows, "task_runs": tasks}, indent=1) + "\n")


# ----------------------------------------------------------------------------------------------- aggregation
def _dur(run: dict[str, Any]) -> float:
    if run.get("start") is None or run.get("end") is None:
        return 0.0
    return float(run["end"]) - float(run["start"])


def _is(name: str, stage: str) -> bool:
    return name == stage or name.startswith(f"{stage}-")


def breakdown(runs: dict[str, Any], wall: float) -> dict[str, Any]:
    """Training time and the rest of ``wall`` by part (:data:`PARTS`) from a sweep's flow and task runs
    (:func:`read_prefect`'s JSON). Leaf task runs only: a subflow's wrapper task run in its parent is not counted
    (its subflow run is). Every part is a disjoint slice of the wall: the parts and the training add up to it."""
    flows, tasks = runs["flow_runs"], runs["task_runs"]
    wrappers = {f["parent_task_run_id"] for f in flows if f.get("parent_task_run_id")}
    leaves = [t for t in tasks if t["id"] not in wrappers]
    sweep_runs = [f for f in flows if f["flow"] == SWEEP_FLOW]
    if len(sweep_runs) != 1:
        raise ValueError(f"expected one sweep flow run, found {len(sweep_runs)}")
    train = [t for t in leaves if _is(t["name"], TRAIN_TASK)]
    training = sum(map(_dur, train))
    data = sum(_dur(t) for t in leaves if any(_is(t["name"], s) for s in DATA_TASKS))
    after = sum(_dur(f) for f in flows if f["flow"] in AFTER_FLOWS)
    noise = sum(_dur(t) for t in leaves if _is(t["name"], "noise-floor"))
    adopt = sum(_dur(t) for t in leaves if _is(t["name"], "adopt-shared"))
    multi = sum(_dur(f) for f in flows if f["flow"] == MULTI_SEED_FLOW) - training
    in_flow = _dur(sweep_runs[0])
    parts = {
        "data": data,
        "after_training": after,
        "noise_floor": noise,
        "adopt": adopt,
        "multi_seed_bookkeeping": multi,
        "sweep_flow": in_flow - training - data - after - noise - adopt - multi,
        "outside_flow_run": wall - in_flow,
    }
    overhead = wall - training
    machinery = overhead - data - after - parts["outside_flow_run"]
    return {
        "wall": wall,
        "training": training,
        "train_runs": len(train),
        "overhead": overhead,
        "machinery": machinery,
        "ratio_all": overhead / training if training > 0 else float("inf"),
        "ratio_machinery": machinery / training if training > 0 else float("inf"),
        "parts": parts,
    }


def epoch_seconds(sweep_dir: Path) -> float:
    """The sum of ``epoch_seconds`` over every variant's seeds' ``metrics.jsonl`` rows (the epochs alone)."""
    total = 0.0
    for path in sorted(sweep_dir.glob("variants/*/seeds/seed_*/metrics.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                total += float(json.loads(line).get("epoch_seconds", 0.0))
    return total


def spread(values: list[float], fmt: str = "{:.1f}") -> str:
    """``median [min-max]``."""
    return f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"


# ----------------------------------------------------------------------------------------------- one repetition
def one_sweep(sweep: Path, work: Path) -> dict[str, Any]:
    """Run the sweep command in ``work`` (its own PREFECT_HOME and sweep directory); its figures."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(work / "prefect-home"), PYTHONPATH=f"{ROOT}{os.pathsep}{env.get('PYTHONPATH', '')}")
    sweep_dir = work / "sweep"
    logf = work / "sweep.log"
    with logf.open("wb") as f:
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "flows.cli.main", "sweep", str(sweep), "--dir", str(sweep_dir)],
            cwd=work,
            env=env,
            stdout=f,
            stderr=subprocess.STDOUT,
        )
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        sys.exit(f"the sweep failed (exit {done.returncode}); see {logf}:\n{logf.read_text()[-3000:]}")
    runs_json = work / "prefect-runs.json"
    read = subprocess.run(
        [sys.executable, str(Path(__file__)), "--read-prefect", str(runs_json)],
        cwd=work,
        env={**env, STARTUP_TIMEOUT_ENV: "600"},  # the client starts a temporary server (20 s limit by default)
        capture_output=True,
        text=True,
    )
    if read.returncode != 0:
        sys.exit(f"reading the Prefect runs failed:\n{read.stderr[-3000:]}")
    runs = json.loads(runs_json.read_text())
    figures = breakdown(runs, wall)
    figures["epoch_seconds"] = epoch_seconds(sweep_dir)
    report = json.loads((sweep_dir / "report.json").read_text())
    figures["chosen"] = report.get("chosen")
    return figures


def describe(b: dict[str, Any]) -> str:
    parts = ", ".join(f"{k} {v:.1f}" for k, v in b["parts"].items())
    return (
        f"wall {b['wall']:.1f} s, training {b['training']:.1f} s ({b['train_runs']} train-seed runs; epochs alone "
        f"{b['epoch_seconds']:.1f} s), overhead {b['overhead']:.1f} s: (a) {100 * b['ratio_all']:.1f} %, "
        f"(b) machinery {b['machinery']:.1f} s = {100 * b['ratio_machinery']:.1f} %; parts (s): {parts}; "
        f"chosen {b['chosen']}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sweep", type=Path, default=SWEEP, help="sweep file (default: the quickstart sweep)")
    p.add_argument("--repeats", type=int, default=3, help="sweeps run one after the other, each in a fresh directory")
    p.add_argument("--keep", action="store_true", help="keep the sweep directories (their path is printed)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    p.add_argument("--read-prefect", type=Path, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.read_prefect:
        read_prefect(a.read_prefect)
        return
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    log(
        f"sweep bench: {a.sweep.resolve().relative_to(ROOT) if a.sweep.resolve().is_relative_to(ROOT) else a.sweep}, "
        f"{a.repeats} repetition(s); commit {commit.stdout.strip()}, {os.cpu_count()} CPUs, "
        f"{datetime.now().isoformat(timespec='minutes')}, load {os.getloadavg()[0]:.2f}"
    )
    rows: list[dict[str, Any]] = []
    for rep in range(a.repeats):
        work = Path(tempfile.mkdtemp(prefix="sweep-bench-"))
        try:
            b = one_sweep(a.sweep.resolve(), work)
        finally:
            if not a.keep:
                subprocess.run(["rm", "-rf", str(work)], check=False)
        b["load_after"] = os.getloadavg()[0]
        rows.append(b)
        log(f"  repetition {rep + 1}: {describe(b)}; load {b['load_after']:.2f}" + (f"; kept {work}" if a.keep else ""))
    log(f"median [min-max] over {len(rows)} repetition(s):")
    for key, label in (
        ("wall", "wall (s)"),
        ("training", "training, train-seed task runs summed (s)"),
        ("epoch_seconds", "  of which the epochs (metrics.jsonl epoch_seconds) (s)"),
        ("overhead", "overhead = wall - training (s)"),
        ("machinery", "sweep's own machinery = overhead - data - after-training - outside the flow (s)"),
    ):
        log(f"  {label:62} {spread([r[key] for r in rows])}")
    for part in PARTS:
        log(f"    {part:60} {spread([r['parts'][part] for r in rows])}")
    ratio_a = [100 * r["ratio_all"] for r in rows]
    ratio_b = [100 * r["ratio_machinery"] for r in rows]
    pct = "{:.1f}"
    ok_a = "meets" if statistics.median(ratio_a) <= 100 * TARGET else "misses"
    ok_b = "meets" if statistics.median(ratio_b) <= 100 * TARGET else "misses"
    log(f"  (a) all non-training time / training (%)                     {spread(ratio_a, pct)}: {ok_a} <= 5 %")
    log(f"  (b) the sweep's own machinery / training (%)                 {spread(ratio_b, pct)}: {ok_b} <= 5 %")
    if a.json:
        a.json.write_text(json.dumps({"repetitions": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
