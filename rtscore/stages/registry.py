"""The pipeline's stages in order, and what derives from their specs: code fingerprints and cache keys.

``STAGES`` are the cached stages, first to last; ``SUMMARIES`` the stages that summarise several runs of a cached
stage once they are all in (multi-seed-train), never cached on their own. ``BY_NAME`` finds either."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from functools import cache
from typing import Any

from rtscore.config.pipeline import PipelineConfig
from rtscore.identity import source_identity
from rtscore.stages.calibrate import SPEC as CALIBRATE
from rtscore.stages.evaluate_test import SPEC as EVALUATE_TEST
from rtscore.stages.generate import SPEC as GENERATE_DATASET
from rtscore.stages.logit_cache import SPEC as LOGIT_CACHE
from rtscore.stages.multi_seed import SPEC as MULTI_SEED_TRAIN
from rtscore.stages.normalization import SPEC as NORMALIZATION_STATS
from rtscore.stages.package import SPEC as PACKAGE
from rtscore.stages.spec import StageSpec, input_identities
from rtscore.stages.train import SPEC as TRAIN_SEED
from rtscore.stages.validate import SPEC as VALIDATE_DATA
from rtscore.storage import RunDir

# First to last: a stage's inputs are produced by stages before it.
STAGES: tuple[StageSpec, ...] = (
    GENERATE_DATASET,
    NORMALIZATION_STATS,
    VALIDATE_DATA,
    TRAIN_SEED,
    LOGIT_CACHE,
    CALIBRATE,
    EVALUATE_TEST,
    PACKAGE,
)
# Summaries over several runs of a stage (after the stage they summarise): not cached, no task of their own.
SUMMARIES: tuple[StageSpec, ...] = (MULTI_SEED_TRAIN,)
BY_NAME: dict[str, StageSpec] = {s.name: s for s in (*STAGES, *SUMMARIES)}


def spec(name: str) -> StageSpec:
    """The spec of stage ``name`` (KeyError naming the known stages otherwise)."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(BY_NAME)}") from None


def producers(stage: StageSpec) -> list[StageSpec]:
    """The stages whose declared outputs this stage reads."""
    found: list[StageSpec] = []
    for other in STAGES:
        if other is stage:
            continue
        reads = (*stage.inputs, *stage.optional_inputs)
        if any(out.match(inp.template) is not None for out in other.outputs for inp in reads):
            found.append(other)
    return found


@cache
def code_fingerprint(name: str) -> str:
    """sha256 of a stage's own code and, recursively, the code of the stages producing its inputs.

    So an edit anywhere upstream re-runs the stages downstream too, even where it happens to reproduce
    the same bytes (a deterministic retraining after a comment edit, say).
    """
    stage = spec(name)
    h = hashlib.sha256(f"{stage.name}\0{stage.own_code_hash()}".encode())
    for up in sorted(producers(stage), key=lambda s: s.name):
        h.update(f"{up.name}\0{code_fingerprint(up.name)}".encode())
    return h.hexdigest()


def cache_key(name: str, run_dir: str, cfg: PipelineConfig, params: Mapping[str, Any]) -> str:
    """The cache key of one run of a stage: its code fingerprint, the config it reads, the run, the
    parameters that select its work, and the identity of each of its inputs (:func:`input_identities`)."""
    stage = spec(name)
    run = RunDir(run_dir)
    h = hashlib.sha256()
    h.update(code_fingerprint(name).encode())
    h.update(stage.config_hash(cfg, params).encode())
    h.update(run.uri.encode())
    for p in stage.params:
        h.update(f"{p}={params.get(p, '')};".encode())
    for line in input_identities(stage, run, cfg, params):
        h.update(f"{line};".encode())
    return f"{name}-{h.hexdigest()}"


def planned_key(
    name: str, cfg: PipelineConfig, params: Mapping[str, Any], run: RunDir, upstream: Mapping[str, str]
) -> str:
    """The identity of a stage run before it runs, independent of where: its code fingerprint, the config it reads,
    the parameters that select its work, the identity of each location it reads outside the run (a GeoTIFF root's
    listing) and, for its inputs, the planned keys of the stage runs producing them (``upstream``: ``<stage>
    <params>`` -> key, of which those of its producers are taken).

    Two runs with the same planned key compute the same artifacts from the same inputs: a sweep computes them once
    and the other variants adopt them (rtscore.sweep). Unlike :func:`cache_key` it leaves out the run's location."""
    stage = spec(name)
    h = hashlib.sha256()
    h.update(code_fingerprint(name).encode())
    h.update(stage.config_hash(cfg, params).encode())
    for p in stage.params:
        h.update(f"{p}={params.get(p, '')};".encode())
    for location in stage.source_locations(cfg, params, run):
        h.update(f"{location}={source_identity(location).digest};".encode())
    made_by = {s.name for s in producers(stage)}
    for label, key in sorted(upstream.items()):
        if label.split(" ", 1)[0] in made_by:
            h.update(f"{label}={key};".encode())
    return h.hexdigest()
