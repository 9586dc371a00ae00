"""prefect.yaml stays in step with the code: every entrypoint is a flow, every stage is deployable alone."""

from __future__ import annotations

import importlib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_every_deployment_entrypoint_is_a_prefect_flow() -> None:
    from prefect import Flow

    doc = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    names = []
    for dep in doc["deployments"]:
        path, func = dep["entrypoint"].split(":")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        flow = getattr(module, func)
        assert isinstance(flow, Flow), dep["entrypoint"]
        names.append(flow.name)
    for stage in ("generate-dataset", "normalization-stats", "validate-data", "train-seed", "multi-seed-train"):
        assert stage in names, f"stage {stage} has no deployment of its own"
