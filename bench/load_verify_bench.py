"""The cost of load = verify (issue 21): loading a deployment package with and without the checks of
`rts package verify` that need no forward pass.

Two real packages are built with the package builder (predict_memory_bench's :func:`build_bench_package`):
the quickstart one (configs/quickstart.yaml: Unet + mobilenet_v2, R, G, B + ndvi) and the guide-size one
(map_bench's: configs/baseline.yaml, UNet++ / EfficientNet-B5, 512 px tiles, R, G, B + ndvi + slope), random-init
weights (the checks read bytes, not what the weights learnt). For each, in one process, side by side and interleaved
(order alternating) ``--repeats`` times after one untimed round:

* without checks: what `load_package` did before issue 21: read model_config.yaml, deployment_config.yaml (calibrated
  numerics), the channel-bound stats, then the weights into the declared model (``rtscore.models.load_model``,
  ``weights_only``) and ``prepare_model``;
* with checks: `rtscore.inference.predict.load_package` on the CPU, its audit cold (a file of the package is
  touched before each run, which is what makes the per-process memo audit again): SHA256SUMS of every file, the
  zip CRC-32 of every weights.pth member, the pickle's globals, the YAML/JSON files, then the same load;
* with checks, memoised: `load_package` again on the unchanged package (what a campaign's later chunks pay);
* the audit alone (``run_audit``), and its two reads of the weights: sha256 and ``audit_weights`` (CRC + pickle scan).

Every file is in the page cache (the untimed round read them): these are CPU costs, not disk reads. Printed: median
[min-max] wall and CPU seconds (this process's, every thread) of each; the difference (cold checks - no checks) of
each repetition, whose two loads ran next to each other, median and range; and the audit alone as a share of the
load without checks (the steadiest figure on a shared machine: the loads' spread is larger than the audit).

    .venv/bin/python bench/load_verify_bench.py             # both packages, 7 repetitions (~2 min on 2 cores)
    .venv/bin/python bench/load_verify_bench.py --quick     # quickstart package only, 3 repetitions: a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.map_bench import DEFAULT_CONFIG  # noqa: E402
from bench.map_bench import build_package as build_guide_package  # noqa: E402
from bench.predict_memory_bench import build_quickstart_package  # noqa: E402


def load_without_checks(pkg: Path) -> Any:
    """`load_package` as it was before issue 21 (on the CPU): the config files, the stats, the weights."""
    from rtscore.data.normalization.stats import load_normalization_stats
    from rtscore.inference.numerics import prepare_model
    from rtscore.models import load_model
    from rtscore.package import DEPLOYMENT, MODEL, STATS, WEIGHTS
    from rtscore.package.verify import read_deployment_config, read_model_config

    mc = read_model_config(pkg / MODEL)
    dep = read_deployment_config(pkg / DEPLOYMENT)
    load_normalization_stats(pkg / STATS, mc.channels.extra)
    return prepare_model(load_model(pkg / WEIGHTS, mc, "cpu"), dep.torch_compile)


def load_with_checks(pkg: Path, *, cold: bool) -> Any:
    """`load_package` on the CPU; ``cold``: a file of the package touched first, so its audit runs again."""
    from rtscore.inference.predict import load_package
    from rtscore.package import SUMS

    if cold:
        os.utime(pkg / SUMS)  # a new mtime and ctime: the memo no longer matches the package's files
    return load_package(pkg, device="cpu")


def audit_only(pkg: Path) -> None:
    from rtscore.package.verify import run_audit

    failed = [c for c in run_audit(pkg, allow_fallback_threshold=True).checks if not c.ok]
    assert not failed, failed


def sha256_weights(pkg: Path) -> None:
    from rtscore.package import WEIGHTS
    from rtscore.storage import sha256_file

    sha256_file(pkg / WEIGHTS)


def crc_and_pickle(pkg: Path) -> None:
    from rtscore.package import WEIGHTS, audit_weights

    assert audit_weights(pkg / WEIGHTS).ok


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall, CPU) seconds of ``fn()``; CPU time is this process's (every thread), less disturbed by other
    processes on a shared machine than wall time."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(pkg: Path, repeats: int) -> dict[str, list[tuple[float, float]]]:
    """Seconds of each way to load ``pkg``, interleaved (order alternating), after one untimed round."""
    ways: dict[str, Callable[[], Any]] = {
        "load without checks": lambda: load_without_checks(pkg),
        "load with checks (cold audit)": lambda: load_with_checks(pkg, cold=True),
        "load with checks (memoised)": lambda: load_with_checks(pkg, cold=False),
        "audit alone": lambda: audit_only(pkg),
        "  sha256 of weights.pth": lambda: sha256_weights(pkg),
        "  zip CRC-32 + pickle scan of weights.pth": lambda: crc_and_pickle(pkg),
    }
    for fn in ways.values():
        fn()
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in ways}
    order = list(ways)
    for r in range(repeats):
        for name in order if r % 2 == 0 else order[::-1]:
            if name == "load with checks (memoised)":
                load_with_checks(pkg, cold=False)  # the memo holds this package's current files
            times[name].append(timed(ways[name]))
    return times


def _stats(xs: list[float]) -> str:
    return f"{statistics.median(xs):>7.3f} [{min(xs):.3f}-{max(xs):.3f}]"


def report(label: str, pkg: Path, times: dict[str, list[tuple[float, float]]]) -> None:
    from rtscore.package import WEIGHTS

    mib = (pkg / WEIGHTS).stat().st_size / 2**20
    print(f"\n{label}: weights.pth {mib:,.1f} MiB, {len(next(iter(times.values())))} repetitions")
    print(f"  {'what':<44} {'wall s, median [min-max]':<26} CPU s, median [min-max]")
    for name, ts in times.items():
        print(f"  {name:<44} {_stats([w for w, _ in ts]):<26} {_stats([c for _, c in ts])}")
    base, cold = times["load without checks"], times["load with checks (cold audit)"]
    for k, what in ((0, "wall"), (1, "CPU")):
        pairs = [c[k] - b[k] for c, b in zip(cold, base, strict=True)]  # the two ran next to each other
        share = statistics.median(t[k] for t in times["audit alone"]) / statistics.median(t[k] for t in base)
        print(
            f"  {what}: cold checks - no checks, per repetition: median {statistics.median(pairs):+.3f} s "
            f"[{min(pairs):+.3f}, {max(pairs):+.3f}]; the audit alone is {share:.0%} of the load without checks"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=7, help="timed repetitions of each (default 7)")
    p.add_argument("--quick", action="store_true", help="quickstart package only, 3 repetitions")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    a = p.parse_args()
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    repeats = 3 if a.quick else a.repeats
    print(f"torch threads {torch.get_num_threads()}, cpu count {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="load_verify_bench_") as tmp:
        quick = build_quickstart_package(Path(tmp) / "quickstart")
        report("quickstart package (Unet / mobilenet_v2)", quick, measure(quick, repeats))
        if not a.quick:
            guide = build_guide_package(Path(tmp) / "guide", DEFAULT_CONFIG, "fp32")
            report("guide-size package (UNet++ / EfficientNet-B5)", guide, measure(guide, repeats))


if __name__ == "__main__":
    main()
