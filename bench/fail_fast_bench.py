"""How long the refusals that must come at once take: a bad config to `rts run`, and missing hub weights offline.

The tests hold what makes them fast, counted rather than timed (a timed bound flakes on a loaded machine): `rts run`
refuses a bad config before it imports Prefect or torch (tests/test_cli.py,
``test_a_config_error_reaches_the_user_at_once``), and a model whose ImageNet or DINOv3 weights are not in the hub
cache fails offline without a name lookup, a connection or a hub download (tests/test_models.py,
``test_missing_imagenet_weights_fail_fast_offline``; tests/test_models_dpt.py,
``test_a_hub_tag_offline_fails_fast_saying_what_to_do``). Here is what that takes in seconds, each in a fresh
interpreter, --repeats times interleaved, median [min-max]:

- (a) `python -m flows.cli run` with a misspelt key in the config (exit 2, one line), beside the interpreter's own
  start (``python -c pass``) and `rts --help` (the same CLI imports, no config read); the tests' old bound was 10 s
  (the command took 25-78 s when it started Prefect's server first);
- (b) ``build_model`` with ``encoder_weights: imagenet`` (Unet / ResNet-18) and with the DINOv3 tag ``lvd1689m``
  (DPT), ``HF_HUB_OFFLINE=1`` and an empty hub cache: the failing call alone, after its imports (timed apart);
  the tests' old bound was 20 s (the hub client retries for ~30 s).

Usage: python bench/fail_fast_bench.py [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# One fresh interpreter: the imports, then the failing build_model call, each timed; prints "<import s> <call s>".
BUILD = """
import sys, time
t0 = time.perf_counter()
from rtscore.config.pipeline import ChannelsConfig, ExtraChannel, ModelConfig
from rtscore.models import ModelConfigError, build_model
import segmentation_models_pytorch, torch
t1 = time.perf_counter()
cfg = {"imagenet": dict(architecture="unet", backbone="resnet18", encoder_weights="imagenet"),
       "dinov3": dict(architecture="dpt", backbone="tu-vit_small_patch16_dinov3", encoder_weights="lvd1689m",
                      decoder_channels=[16, 16, 16, 16])}[sys.argv[1]]
try:
    build_model(ModelConfig(**cfg), ChannelsConfig(extra=[ExtraChannel(name="ndvi", band=0)]))
except ModelConfigError as err:
    assert "not in the local cache" in str(err), err
else:
    raise SystemExit("the weights were found: not an offline failure")
print(f"{t1 - t0:.4f} {time.perf_counter() - t1:.4f}")
"""


def wall(cmd: list[str], env: dict[str, str], cwd: Path, rc: int = 0) -> float:
    """Seconds ``cmd`` takes, start to exit (its exit status checked)."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    if done.returncode != rc:
        raise SystemExit(f"{' '.join(cmd[:4])} ...: exit {done.returncode}, expected {rc}:\n{done.stderr}")
    return seconds


def fmt(xs: list[float]) -> str:
    return f"{statistics.median(xs):.2f} s [{min(xs):.2f}-{max(xs):.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 repeat: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.repeats = 1

    from tests.helpers import tiny_pipeline_config

    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="rts-fail-fast-bench-") as tmp:
        work = Path(tmp)
        config = tiny_pipeline_config()
        config["training"]["max_epoch"] = 3  # a misspelt key, as the CLI test's
        (work / "bad.yaml").write_text(yaml.safe_dump(config))
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(PREFECT_HOME=str(work / "prefect-home"), PYTHONPATH=str(ROOT))
        offline = {**env, "HF_HUB_OFFLINE": "1", "HF_HOME": str(work / "empty-hf-home")}
        bad_run = [py, "-m", "flows.cli", "run", "--config", str(work / "bad.yaml"), "--run", str(work / "run")]
        start, help_, refused = [], [], []
        hub: dict[str, tuple[list[float], list[float]]] = {"imagenet": ([], []), "dinov3": ([], [])}
        for _ in range(args.repeats):
            start.append(wall([py, "-c", "pass"], env, work))
            help_.append(wall([py, "-m", "flows.cli", "--help"], env, work))
            refused.append(wall(bad_run, env, work, rc=2))
            for what, (imports, call) in hub.items():
                out = subprocess.run(
                    [py, "-c", BUILD, what], env=offline, cwd=work, capture_output=True, text=True, timeout=600
                )
                if out.returncode != 0:
                    raise SystemExit(f"build_model ({what}) offline: exit {out.returncode}:\n{out.stderr}")
                a, b = (float(x) for x in out.stdout.split())
                imports.append(a)
                call.append(b)
        ratios = sorted(r / h for r, h in zip(refused, help_, strict=True))
        print(f"(a) python -c pass (the interpreter's start):           {fmt(start)}")
        print(f"(a) rts --help:                                         {fmt(help_)}")
        print(f"(a) rts run, a misspelt config key (exit 2):            {fmt(refused)} (old test bound 10 s)")
        print(f"(a) ratio rts run refusal / rts --help:                 {statistics.median(ratios):.2f}x")
        for what, (imports, call) in hub.items():
            print(
                f"(b) {what:8s} offline: imports {fmt(imports)}, the failing build_model {fmt(call)} (old bound 20 s)"
            )
        print(f"{args.repeats} interleaved repetition(s), median [min-max]")


if __name__ == "__main__":
    main()
