"""Code identity: the import closure of a module inside the project, hashed.

A result's code identity is derived, never listed: the import closure of the module that computes it, read
from the source with :mod:`ast` (function-local imports included, ``TYPE_CHECKING`` blocks not), hashed file
by file, plus the versions of the third-party distributions that closure imports. Stage cache keys
(:mod:`rtscore.stages`), training resume points, tiling runs and mapping logs all take their code identity
from here.
"""

from __future__ import annotations

import ast
import hashlib
import sys
from functools import cache
from importlib import metadata
from pathlib import Path

PROJECT_PACKAGE = "rtscore"
PROJECT_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the rtscore package


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
