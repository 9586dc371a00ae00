"""Cache keys on (stage code, resolved config, content fingerprints of input artifacts)."""

from __future__ import annotations

import hashlib
from typing import Any

from prefect.context import TaskRunContext

from rtscore.stages import stage_code_hash, stage_config_hash
from rtscore.storage import RunDir


def stage_cache_key(stage: str, inputs: tuple[str, ...] = (), params: tuple[str, ...] = ("split",)) -> Any:
    """A Prefect ``cache_key_fn``: the URI of an input is not enough, its sha256 from the manifest is.

    An input containing ``{seed}`` stands for the task's ``seed`` parameter, or each of its ``seeds``.
    """

    def key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
        run = RunDir(parameters["run_dir"])
        h = hashlib.sha256()
        h.update(stage_code_hash(stage).encode())
        h.update(stage_config_hash(stage, parameters["cfg"]).encode())
        h.update(run.uri.encode())
        for name in params:
            h.update(f"{name}={parameters.get(name, '')};".encode())
        for rel in _expand(inputs, parameters):
            entry = run.entry(rel)
            h.update(f"{rel}={entry.sha256 if entry else 'missing'};".encode())
        return f"{stage}-{h.hexdigest()}"

    return key


def _expand(inputs: tuple[str, ...], parameters: dict[str, Any]) -> list[str]:
    seeds = parameters.get("seeds") or ([parameters["seed"]] if parameters.get("seed") is not None else [])
    out: list[str] = []
    for rel in inputs:
        out += [rel.format(seed=s) for s in seeds] if "{seed}" in rel else [rel]
    return out
