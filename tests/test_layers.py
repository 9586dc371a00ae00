"""Architecture rules: rtscore never imports Prefect; `rts --help` answers without heavy imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_rtscore_source_never_imports_prefect_or_the_orchestration_layer() -> None:
    offenders = []
    for f in (ROOT / "rtscore").rglob("*.py"):
        for n, line in enumerate(f.read_text().splitlines(), 1):
            s = line.strip()
            if s.startswith(("import ", "from ")) and any(
                s.split()[1].split(".")[0] == m for m in ("prefect", "flows", "tasks")
            ):
                offenders.append(f"{f.relative_to(ROOT)}:{n}: {s}")
    assert offenders == []


def test_importing_every_rtscore_module_loads_no_prefect() -> None:
    code = (
        "import importlib, pkgutil, sys, rtscore\n"
        "for m in pkgutil.walk_packages(rtscore.__path__, 'rtscore.'):\n"
        "    importlib.import_module(m.name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('prefect', 'flows', 'tasks')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_cli_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from flows.cli import parser\n"
        "parser().format_help()\n"
        "heavy = [m for m in ('torch', 'prefect', 'zarr', 'albumentations', 'mlflow', 'segmentation_models_pytorch')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
