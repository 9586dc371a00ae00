"""Why the same commit trains different weights on different CPU types, shown on one machine.

torch picks its CPU kernels at run time from what the processor offers: ATen's vectorized kernels (reductions,
elementwise ops, the optimizer's foreach ops) at the highest capability it finds (default / avx2 / avx512;
``torch.backends.cpu.get_cpu_capability()``), oneDNN's convolutions from the widest instruction set it finds
(SSE4.1 ... AVX2 ... AVX-512, AMX; capped by ``ONEDNN_MAX_CPU_ISA``), MKL's BLAS likewise (``MKL_CBWR``).
Wider vectors split and block a sum differently, float addition is not associative, so the same training run
rounds differently on an AVX2 laptop and an AVX-512 server: bit-identical per machine, not across CPU types.

This script trains the quickstart model (configs/quickstart.yaml, via bench/train_bench.py's setup: the real
loop, loader, augmentation, EMA) a few steps in a fresh subprocess per environment setting and prints the
sha256 of the weights each gives, so the settings that change the code path show up as different hashes, and
whether pinning the dispatch makes two runs (and the capped runs of a wider CPU) agree.

Usage: python bench/cpu_determinism.py [--quick] [--steps N] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The settings compared: a name and the environment it runs under (on top of a clean copy of this one).
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_CBWR": "AVX2"}
# The lowest common denominator of x86-64: every CPU of that family can take this code path.
PORTABLE = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_CBWR": "COMPATIBLE"}
SETTINGS: list[tuple[str, dict[str, str]]] = [
    ("native", {}),
    ("native (again)", {}),
    ("aten default", {"ATEN_CPU_CAPABILITY": "default"}),
    ("aten avx2", {"ATEN_CPU_CAPABILITY": "avx2"}),
    ("onednn AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ("onednn SSE41", {"ONEDNN_MAX_CPU_ISA": "SSE41"}),
    ("aten avx2 + onednn AVX2", {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ("pinned avx2 (aten + onednn + mkl)", PINNED),
    ("pinned avx2 (again)", PINNED),
    ("pinned avx2, 1 thread", {**PINNED, "OMP_NUM_THREADS": "1"}),
    ("portable (aten default + onednn SSE41 + mkl COMPATIBLE)", PORTABLE),
]
ENV_KEYS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_CBWR", "OMP_NUM_THREADS", "ONEDNN_VERBOSE")


def cpu_info() -> dict[str, Any]:
    """lscpu's model name and the vector-instruction flags that decide the kernels (empty where lscpu is absent)."""
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"model_name": "unknown (no lscpu)", "vector_flags": []}
    fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}
    flags = fields.get("Flags", "").split()
    wanted = ("sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512", "avx_vnni", "amx")
    return {
        "model_name": fields.get("Model name", "unknown"),
        "cpus": fields.get("CPU(s)", "?"),
        "vector_flags": sorted(f for f in flags if f.startswith(wanted)),
    }


def clean_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env.update(extra)
    return env


def probe_isa(env: dict[str, str]) -> dict[str, str]:
    """What torch and oneDNN pick under ``env``: ATen's capability and oneDNN's ISA line (from ONEDNN_VERBOSE)."""
    code = (
        "import torch\n"
        "print('ATEN', torch.backends.cpu.get_cpu_capability(), flush=True)\n"
        "c = torch.nn.Conv2d(4, 8, 3).to(memory_format=torch.channels_last)\n"
        "x = torch.randn(2, 4, 16, 16).contiguous(memory_format=torch.channels_last).requires_grad_()\n"
        "c(x).sum().backward()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env={**env, "ONEDNN_VERBOSE": "1"}, capture_output=True, text=True, check=True
    ).stdout
    aten = next((line.split(None, 1)[1] for line in out.splitlines() if line.startswith("ATEN ")), "?")
    isa = next((line.split("isa:", 1)[1] for line in out.splitlines() if ",isa:" in line), "?")
    return {"aten": aten, "onednn_isa": isa}


def train_worker(run_dir: Path, steps: int, quick: bool) -> dict[str, Any]:
    """In the subprocess: ``steps`` real training steps of the quickstart model (seed 42) and the weights' sha256."""
    import torch

    from bench.train_bench import FIRST_EPOCH, SEED, bench_config, start_epoch, weights_digest
    from rtscore.train.loop import build_setup, train_one_epoch

    s = build_setup(bench_config(quick=quick, steps=steps, workers=0), run_dir, SEED)
    start_epoch(s, FIRST_EPOCH)
    row = train_one_epoch(s, FIRST_EPOCH)
    digest, _ = weights_digest(s.model)
    return {
        "sha256": digest,
        "loss": row["train_loss"],
        "threads": torch.get_num_threads(),
        "aten": torch.backends.cpu.get_cpu_capability(),
        "samples_per_s": row["train_samples_per_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="64 px tiles, batch 8 (a smoke run)")
    p.add_argument("--steps", type=int, default=None, help="training steps per run (default 6; quick 2)")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)  # internal: train in this run dir
    args = p.parse_args()
    steps = args.steps or (2 if args.quick else 6)
    if args.worker:
        print("RESULT " + json.dumps(train_worker(Path(args.worker), steps, args.quick)))
        return

    from bench.train_bench import bench_config, build_run_dir

    t0 = time.perf_counter()
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rts-cpu-determinism-"))
    info = cpu_info()
    print(f"CPU: {info['model_name']} ({info['cpus']} CPUs); vector flags: {' '.join(info['vector_flags'])}")
    results: list[dict[str, Any]] = []
    try:
        run_dir = workdir / "run"
        build_run_dir(bench_config(quick=args.quick, steps=steps, workers=0), run_dir)
        for name, extra in SETTINGS:
            env = clean_env(extra)
            cmd = [sys.executable, __file__, "--worker", str(run_dir), "--steps", str(steps)]
            proc = subprocess.run(
                cmd + (["--quick"] if args.quick else []), env=env, capture_output=True, text=True, check=False
            )
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if proc.returncode != 0 or line is None:
                sys.exit(f"setting {name!r} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
            res = {"setting": name, "env": extra, **json.loads(line[len("RESULT ") :]), **probe_isa(env)}
            results.append(res)
            print(
                f"  {name:55s} sha256 {res['sha256'][:16]}  loss {res['loss']:.7f}  "
                f"{res['samples_per_s']:5.1f} samples/s  aten {res['aten']:7s} onednn {res['onednn_isa']}",
                flush=True,
            )
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    groups: dict[str, list[str]] = {}
    for r in results:
        groups.setdefault(r["sha256"], []).append(r["setting"])
    print(f"{len(groups)} distinct weights over {len(results)} runs of {steps} steps (same seed, data, code):")
    for digest, names in groups.items():
        print(f"  {digest[:16]}: {', '.join(names)}")
    by = {r["setting"]: r["sha256"] for r in results}
    checks = {
        "native runs agree": by["native"] == by["native (again)"],
        "pinned runs agree": by["pinned avx2 (aten + onednn + mkl)"] == by["pinned avx2 (again)"],
        "aten capability changes the weights": by["aten avx2"] != by["native"],
        "onednn ISA changes the weights": by["onednn AVX2"] != by["native"],
        "MKL_CBWR changes the weights": by["pinned avx2 (aten + onednn + mkl)"] != by["aten avx2 + onednn AVX2"],
        "thread count changes the weights": by["pinned avx2, 1 thread"] != by["pinned avx2 (again)"],
    }
    for k, v in checks.items():
        print(f"  {k}: {'yes' if v else 'no'}")
    print(f"total {time.perf_counter() - t0:.0f} s")
    print(json.dumps({"cpu": info, "steps": steps, "results": results, "checks": checks}))


if __name__ == "__main__":
    main()
