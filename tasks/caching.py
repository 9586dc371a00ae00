"""Cache keys on (stage code, resolved config, content fingerprints of input artifacts)."""

from __future__ import annotations

import hashlib
from typing import Any

from prefect.context import TaskRunContext

from rtscore.stages import stage_code_hash, stage_config_hash
from rtscore.storage import RunDir


def stage_cache_key(stage: str, inputs: tuple[str, ...] = (), params: tuple[str, ...] = ("split",)) -> Any:
    """A Prefect ``cache_key_fn``: the URI of an input is not enough, its sha256 from the manifest is."""

    def key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
        run = RunDir(parameters["run_dir"])
        h = hashlib.sha256()
        h.update(stage_code_hash(stage).encode())
        h.update(stage_config_hash(stage, parameters["cfg"]).encode())
        h.update(run.uri.encode())
        for name in params:
            h.update(f"{name}={parameters.get(name, '')};".encode())
        for rel in inputs:
            entry = run.entry(rel)
            h.update((entry.sha256 if entry else "missing").encode())
        return f"{stage}-{h.hexdigest()}"

    return key
