"""A stage declared once: its function, inputs and outputs (run-layout entries) and the config it reads.

A :class:`StageSpec` is the single source for everything that must agree about a stage:

- what the stage body requires (:func:`require_inputs`) and may record (:func:`record`);
- the manifest's stage hashes of each artifact (``config_hash``: the config the stage reads;
  ``code_hash``: its code fingerprint);
- the orchestration layer's cache key (:func:`rtscore.stages.registry.cache_key`) and task definition.

The code fingerprint is derived, never listed: the import closure of the stage function's module inside
the project, read from the source with :mod:`ast` (function-local imports included, ``TYPE_CHECKING``
blocks not), hashed file by file, plus the versions of the third-party distributions that closure imports.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rtscore.config.base import canonical_json
from rtscore.config.pipeline import PipelineConfig
from rtscore.storage import ArtifactEntry, RunDir
from rtscore.storage.layout import Entry

PROJECT_PACKAGE = "rtscore"
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the rtscore package


class ArtifactRef(BaseModel):
    """What a stage hands to the next: where its artifact is and its content fingerprint."""

    uri: str = Field(..., description="Local path or URI of the artifact.")
    path: str = Field(..., description="Path relative to the run directory.")
    sha256: str = Field(..., description="Content fingerprint (see rtscore.storage.fingerprint).")
    bytes: int = Field(..., description="Size in bytes.")
    stage: str = Field(..., description="Producing stage.")


@dataclass(frozen=True)
class StageSpec:
    """One pipeline stage.

    ``params`` names the stage function's arguments that select its work (``split``, ``seed`` or ``seeds``):
    they fill the inputs' placeholders, key the cache and name the task run. ``config`` lists the config
    sections (or ``section.field`` keys) the stage reads; ``config_ignores`` the ``section.field`` keys inside
    them that cannot change its output.
    """

    name: str
    fn: Callable[..., Any]
    inputs: tuple[Entry, ...]
    outputs: tuple[Entry, ...]
    config: tuple[str, ...]
    config_ignores: tuple[str, ...] = ()
    optional_inputs: tuple[Entry, ...] = ()
    params: tuple[str, ...] = ()
    description: str = field(default="", compare=False)

    @property
    def module(self) -> str:
        return str(self.fn.__module__)

    def config_hash(self, cfg: PipelineConfig) -> str:
        """sha256 of the config this stage reads (the manifest's ``config_hash`` of its artifacts)."""
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
        for key in self.config_ignores:
            section, _, name = key.partition(".")
            picked.get(section, {}).pop(name, None)
        return hashlib.sha256(canonical_json(picked).encode()).hexdigest()

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


def record(spec: StageSpec, run: RunDir, rel: str, cfg: PipelineConfig) -> ArtifactRef:
    """Record a declared output of ``spec`` in the manifest (last, after the artifact is in place)."""
    spec.output_entry(rel)
    return ref_of(run, run.record(rel, spec.name, spec.config_hash(cfg), code_hash=spec.own_code_hash()))


def ref_of(run: RunDir, entry: ArtifactEntry) -> ArtifactRef:
    """The reference a stage hands on for a manifest entry (a gs:// run hands on gs:// URIs)."""
    uri = entry.uri if run.remote else str(run.path(entry.path))
    return ArtifactRef(uri=uri, path=entry.path, sha256=entry.sha256, bytes=entry.bytes, stage=entry.stage)


# --------------------------------------------------------------------------- code fingerprints
def module_file(module: str) -> Path | None:
    """The source file of a project module (``rtscore.x.y``), or None for anything else."""
    if module != PROJECT_PACKAGE and not module.startswith(PROJECT_PACKAGE + "."):
        return None
    base = PROJECT_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, module: str) -> tuple[set[str], set[str]]:
    """(project modules, third-party top-level names) imported anywhere in ``path`` but TYPE_CHECKING blocks."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    project: set[str] = set()
    external: set[str] = set()

    def add(name: str) -> None:
        if module_file(name) is not None:
            project.add(name)
        elif not name.startswith(PROJECT_PACKAGE):
            top = name.partition(".")[0]
            if top not in sys.stdlib_module_names and top != "__future__":
                external.add(top)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.rsplit(".", child.level - 1)[0] if child.level > 1 else package
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                add(target)
                for alias in child.names:  # `from pkg import submodule`
                    if module_file(f"{target}.{alias.name}") is not None:
                        project.add(f"{target}.{alias.name}")
            visit(child)

    visit(tree)
    return project, external


@cache
def code_closure(module: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(project modules, third-party names) reachable from ``module`` through imports, each sorted.

    Importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` too, but a module only depends on the
    code whose names it imports: a package ``__init__`` is part of the closure where it is imported from,
    not merely passed through. That keeps closures as narrow as the code's real dependencies.
    """
    seen: set[str] = set()
    external: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        path = module_file(name)
        if path is None:
            raise ValueError(f"{name} is not a module of the {PROJECT_PACKAGE} package")
        seen.add(name)
        project, ext = imports_of(path, name)
        external |= ext
        todo += sorted(project - seen)
    return tuple(sorted(seen)), tuple(sorted(external))


def source_bytes(path: Path) -> bytes:
    """The bytes a fingerprint hashes (one place, so that tests can simulate an edited file)."""
    return path.read_bytes()


@cache
def _distribution_versions() -> dict[str, str]:
    """Top-level import name -> ``dist==version`` of the installed distributions providing it."""
    out: dict[str, str] = {}
    for top, dists in metadata.packages_distributions().items():
        versions = sorted({f"{d}=={metadata.version(d)}" for d in dists})
        out[top] = ",".join(versions)
    return out


def closure_hash(module: str) -> str:
    """sha256 over the closure's files (path and content) and the versions of what it imports."""
    modules, external = code_closure(module)
    h = hashlib.sha256()
    for name in modules:
        path = module_file(name)
        assert path is not None  # code_closure resolved it
        h.update(f"{path.relative_to(PROJECT_ROOT).as_posix()}\0".encode())
        h.update(hashlib.sha256(source_bytes(path)).digest())
    versions = _distribution_versions()
    for top in external:
        h.update(f"{top}={versions.get(top, 'not installed')};".encode())
    return h.hexdigest()


# --------------------------------------------------------------------------- config each stage group reads
DATA_CONFIG = ("schema_version", "data", "channels", "splits", "normalization", "sampling", "augmentation")
TRAINING_CONFIG = (*DATA_CONFIG, "loss", "training", "optimizer", "lr_schedule", "ema", "model", "metrics")
