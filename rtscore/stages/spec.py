"""A stage declared once: its function, inputs and outputs (run-layout entries) and the config it reads.

A :class:`StageSpec` is the single source for everything that must agree about a stage:

- what the stage body requires (:func:`require_inputs`) and may record (:func:`record`);
- the manifest's stage hashes of each artifact (``config_hash``: the config the stage reads;
  ``code_hash``: its code fingerprint);
- the orchestration layer's cache key (:func:`rtscore.stages.registry.cache_key`) and task definition.

The code fingerprint is derived, never listed: the import closure of the stage function's module
(:mod:`rtscore.identity.code`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field

from rtscore.config.pipeline import PipelineConfig
from rtscore.identity import digest, source_identity
from rtscore.identity import resume_key as identity_resume_key
from rtscore.identity.code import closure_hash, code_closure, imports_of, module_file
from rtscore.storage import ArtifactEntry, RunDir
from rtscore.storage.layout import Entry


class ArtifactRef(BaseModel):
    """What a stage hands to the next: where its artifact is and its content fingerprint."""

    uri: str = Field(..., description="Local path or URI of the artifact.")
    path: str = Field(..., description="Path relative to the run directory.")
    sha256: str = Field(..., description="Content fingerprint (see rtscore.storage.fingerprint).")
    bytes: int = Field(..., description="Size in bytes.")
    stage: str = Field(..., description="Producing stage.")


# Settings of a data check alone: the stage that checks (``checks``: validate-data) keys on them, no other stage
# does (a stricter geographic buffer re-runs the check, not the datasets, stats or training).
CHECK_SETTINGS = ("splits.min_distance_m",)


def fold_devices_into_batch(training: dict[str, Any]) -> None:
    """A stage's picked ``training`` settings keyed by what a step computes: one seed on N devices takes the steps
    of one device at ``batch_size`` x N (rtscore.train.distributed), so a number of devices is folded into the
    batch (2 x 16 keys as 1 x 32; one device keys as before there were devices). ``auto`` stays in the key as
    ``auto``: the machine decides its N, and the resume key holds the resolved one (rtscore.stages.train)."""
    devices = training.pop("devices", None)
    if devices == "auto":
        training["devices"] = devices
    elif devices is not None and "batch_size" in training:
        training["batch_size"] *= int(devices)


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage.

    ``params`` names the stage function's arguments that select its work (``split``, ``seed`` or ``seeds``):
    they fill the inputs' placeholders, key the cache and name the task run. ``sources`` gives the locations the
    stage reads outside the run directory's recorded artifacts (a GeoTIFF data root), for these settings.
    ``config`` lists the config sections (or ``section.field`` keys) the stage reads; ``config_ignores`` the
    ``section.field`` keys inside them that cannot change its output; ``per_split`` the ``section.field`` mappings
    keyed by split of which a run for one ``split`` reads only that split's entry (``data.generation``);
    ``checks`` marks the stage that checks the data, the one keyed on :data:`CHECK_SETTINGS`.
    """

    name: str
    fn: Callable[..., Any]
    inputs: tuple[Entry, ...]
    outputs: tuple[Entry, ...]
    config: tuple[str, ...]
    config_ignores: tuple[str, ...] = ()
    optional_inputs: tuple[Entry, ...] = ()
    params: tuple[str, ...] = ()
    per_split: tuple[str, ...] = ()
    sources: Callable[[PipelineConfig, Mapping[str, Any], RunDir], list[str]] | None = field(
        default=None, compare=False
    )
    description: str = field(default="", compare=False)
    checks: bool = False

    def source_locations(self, cfg: PipelineConfig, params: Mapping[str, Any], run: RunDir) -> list[str]:
        """What the stage reads from outside the run's recorded artifacts (a GeoTIFF data root, an adopted
        store): local paths or gs:// URIs, whose listing identity keys its results (rtscore.identity)."""
        return self.sources(cfg, params, run) if self.sources is not None else []

    @property
    def module(self) -> str:
        return str(self.fn.__module__)

    def config_hash(self, cfg: PipelineConfig, params: Mapping[str, Any] | None = None) -> str:
        """sha256 of the config this stage reads (the manifest's ``config_hash`` of its artifacts); for a run of one
        ``split`` (in ``params``), of the ``per_split`` mappings only that split's entry."""
        data = cfg.model_dump(mode="json")
        picked: dict[str, Any] = {}
        for key in self.config:
            section, _, name = key.partition(".")
            if section not in data:
                raise KeyError(f"stage {self.name}: config section {section!r} does not exist")
            if name:
                picked.setdefault(section, {})[name] = data[section][name]
            else:
                picked[section] = data[section]
        for key in (*self.config_ignores, *(() if self.checks else CHECK_SETTINGS)):
            section, _, name = key.partition(".")
            picked.get(section, {}).pop(name, None)
        fold_devices_into_batch(picked.get("training", {}))
        split = (params or {}).get("split")
        for key in self.per_split if split is not None else ():
            section, _, name = key.partition(".")
            by_split = picked.get(section, {}).get(name)
            if isinstance(by_split, dict):
                picked[section][name] = {str(split): by_split.get(str(split))}
        return digest(picked)

    def input_paths(self, params: Mapping[str, Any], *, optional: bool = False) -> list[str]:
        """The run-relative paths of the inputs (or the optional inputs) for these parameter values."""
        return expand(self.optional_inputs if optional else self.inputs, params)

    def output_entry(self, rel: str) -> Entry:
        """The declared output ``rel`` is an instance of; anything else is a bug in the stage."""
        for entry in self.outputs:
            if entry.match(rel) is not None:
                return entry
        raise ValueError(f"stage {self.name} records {rel!r}, which is not among its declared outputs")

    def own_code_hash(self) -> str:
        """sha256 of the stage's own import closure (see :func:`code_closure`) and third-party versions."""
        return closure_hash(self.module)


def expand(entries: Iterable[Entry], params: Mapping[str, Any]) -> list[str]:
    """Fill each entry's placeholders from ``params``: ``{seed}`` takes ``seed`` or each of ``seeds``."""
    seeds = params.get("seeds") or ([params["seed"]] if params.get("seed") is not None else [])
    out: list[str] = []
    for entry in entries:
        if "seed" in entry.fields:
            out += [entry.at(seed=s, **{k: params[k] for k in entry.fields if k != "seed"}) for s in seeds]
        else:
            out.append(entry.at(**{k: params[k] for k in entry.fields}))
    return out


def require_inputs(spec: StageSpec, run: RunDir, **params: Any) -> None:
    """Stage (gs://) and verify every declared input; an optional input is fetched when it was recorded."""
    for rel in spec.input_paths(params):
        run.require(rel)
    for rel in spec.input_paths(params, optional=True):
        run.fetch(rel)


def input_identities(spec: StageSpec, run: RunDir, cfg: PipelineConfig, params: Mapping[str, Any]) -> list[str]:
    """One line per input of a stage run: ``<rel>=<recorded sha256>`` for each artifact of the run directory it
    reads, ``<location>=<listing digest>`` for each location outside it (:func:`rtscore.identity.source_identity`).
    The one description of "what it read" that cache keys and resume points share."""
    lines = []
    for rel in expand((*spec.inputs, *spec.optional_inputs), params):
        entry = run.entry(rel)
        lines.append(f"{rel}={entry.sha256 if entry else 'missing'}")
    for location in spec.source_locations(cfg, params, run):
        lines.append(f"{location}={source_identity(location).digest}")
    return lines


def resume_key(
    spec: StageSpec, run: RunDir, cfg: PipelineConfig, params: Mapping[str, Any], *, config_hash: str
) -> str:
    """The identity a resume point of a stage run must carry to be resumed (a checkpoint, staged shards).

    The stage's own code identity, ``config_hash`` (the config the resumed work depends on, less settings that
    may change between a run and its resume), the parameters that select the work and every input's identity
    (:func:`input_identities`). Upstream code is not in it: an upstream edit that changes an input changes its
    identity here, and one that reproduces the same bytes leaves the resume point valid. Unlike the cache key it
    leaves out the run's location, so a run directory copied elsewhere still resumes. Composed as every resume key
    is (:func:`rtscore.identity.resume_key` of the stage's module)."""
    selected = {p: params.get(p, "") for p in spec.params}
    return identity_resume_key(spec.module, config_hash, selected, input_identities(spec, run, cfg, params))


def record(spec: StageSpec, run: RunDir, rel: str, cfg: PipelineConfig) -> ArtifactRef:
    """Record a declared output of ``spec`` in the manifest (last, after the artifact is in place)."""
    fields = spec.output_entry(rel).match(rel) or {}
    return ref_of(run, run.record(rel, spec.name, spec.config_hash(cfg, fields), code_hash=spec.own_code_hash()))


def ref_of(run: RunDir, entry: ArtifactEntry) -> ArtifactRef:
    """The reference a stage hands on for a manifest entry (a gs:// run hands on gs:// URIs)."""
    uri = entry.uri if run.remote else str(run.path(entry.path))
    return ArtifactRef(uri=uri, path=entry.path, sha256=entry.sha256, bytes=entry.bytes, stage=entry.stage)


def recorded(
    spec: StageSpec, run: RunDir, params: Mapping[str, Any], outputs: Iterable[Entry] | None = None
) -> list[ArtifactRef]:
    """What a run of ``spec`` with these parameter values recorded, read back from the manifest as the stage
    returned it (sorted by path): the records by ``spec`` of its declared ``outputs`` (default: all of them) whose
    placeholders agree with ``params`` (``seed`` with ``seed`` or one of ``seeds``, ``split`` with ``split``).

    How a result comes back from a stage run in another process (a child flow run on another worker), with no
    result storage shared between them: the manifest is the record."""
    entries = tuple(outputs) if outputs is not None else spec.outputs
    return [
        ref_of(run, e)
        for rel, e in sorted(run.read_manifest().artifacts.items())
        if e.stage == spec.name and any(_selected(entry.match(rel), params) for entry in entries)
    ]


def _selected(fields: dict[str, str] | None, params: Mapping[str, Any]) -> bool:
    if fields is None:
        return False
    seeds = params.get("seeds") or ([params["seed"]] if params.get("seed") is not None else None)
    for name, value in fields.items():
        if name == "seed" and seeds is not None and int(value) not in seeds:
            return False
        if name != "seed" and name in params and str(params[name]) != value:
            return False
    return True


# --------------------------------------------------------------------------- config each stage group reads
DATA_CONFIG = ("schema_version", "data", "channels", "splits", "normalization", "sampling", "augmentation")
TRAINING_CONFIG = (*DATA_CONFIG, "loss", "training", "optimizer", "lr_schedule", "ema", "model", "metrics")

__all__ = [
    "DATA_CONFIG",
    "TRAINING_CONFIG",
    "ArtifactRef",
    "StageSpec",
    "closure_hash",
    "code_closure",
    "expand",
    "imports_of",
    "input_identities",
    "module_file",
    "record",
    "recorded",
    "ref_of",
    "require_inputs",
    "resume_key",
]
