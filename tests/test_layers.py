"""Architecture rules that check themselves: layers, packages, import cycles, private names, run-dir paths."""

from __future__ import annotations

import ast
import string
import subprocess
import sys
from pathlib import Path

from rtscore.stages.spec import imports_of, module_file
from rtscore.storage import layout
from rtscore.storage.layout import Entry, RunLayout

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [f for d in ("rtscore", "flows", "tasks") for f in sorted((ROOT / d).rglob("*.py"))]
BANNED = ("prefect", "flows", "tasks")
TOP_LEVEL_MODULES = {"__init__.py", "errors.py", "runtime.py", "tracking.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def rtscore_modules() -> dict[str, Path]:
    return {module_name(f): f for f in SOURCES if f.relative_to(ROOT).parts[0] == "rtscore"}


# The packages bottom to top (docs/architecture.md, "Layers"): a package imports only packages of a lower layer;
# packages sharing a layer import nothing of each other. `rtscore` is the root package's __init__ (the version).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("rtscore", "errors", "report"),
    ("storage",),
    ("identity",),
    ("config",),
    ("runtime", "tracking"),
    ("data",),
    ("metrics", "losses"),
    ("models",),
    ("train",),
    ("package",),
    ("inference",),
    ("calibrate", "evaluation", "mapping"),
    ("review",),
    ("stages",),
    ("sweep", "diagnostics"),
    ("tasks",),
    ("flows",),
)


def package_of(module: str) -> str:
    """The layered package of a project module: ``rtscore.data.tiles`` -> data, ``rtscore.models`` -> models,
    ``rtscore`` -> rtscore, ``flows.cli.main`` -> flows."""
    parts = module.split(".")
    return parts[1] if parts[0] == "rtscore" and len(parts) > 1 else parts[0]


def is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def project_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every project import in ``path``: module top, function-local and TYPE_CHECKING blocks
    alike (a type is a dependency too); relative imports resolved, ``from pkg import submodule`` as the submodule."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if is_module(f"{target}.{a.name}")]
            out += [(node.lineno, t) for t in subs or [target]]
    return [(line, t) for line, t in out if t.split(".")[0] in ("rtscore", "flows", "tasks")]


def test_every_package_has_a_layer() -> None:
    packages = {package_of(module_name(f)) for f in SOURCES}
    layered = {p for layer in LAYERS for p in layer}
    assert packages - layered == set(), "place each new package in LAYERS (and in docs/architecture.md)"
    assert layered - packages == set(), "LAYERS names a package that does not exist"


def test_imports_point_down_the_layers_only() -> None:
    """Each package imports only packages below it, function-local and TYPE_CHECKING imports included."""
    rank = {p: i for i, layer in enumerate(LAYERS) for p in layer}
    offenders = []
    for f in SOURCES:
        here = package_of(module_name(f))
        for line, target in project_imports(f):
            there = package_of(target)
            if there != here and rank.get(there, -1) >= rank.get(here, -1):
                offenders.append(f"{f.relative_to(ROOT)}:{line}: {here} -> {there} ({target})")
    assert not offenders, "imports that do not point down the layers:\n" + "\n".join(offenders)


# Inside flows/ (docs/architecture.md, "Layers"): the parameter models and shared helpers, then the flows, then the
# `rts` command-line machinery (flows/cli/), which starts flows; a flow never imports the CLI.
FLOWS_LAYERS: tuple[tuple[str, ...], ...] = (
    ("flows", "flows.fields", "flows.failures", "flows.render", "flows.server_watchdog"),
    ("flows.form",),
    ("flows.params",),
    ("flows.ui", "flows.common"),
    ("flows.fanout", "flows.stage_flow"),
    ("flows.data", "flows.train", "flows.calibrate", "flows.review", "flows.mapping"),
    ("flows.pipeline",),
    ("flows.sweep",),
    ("flows.cli",),
)


def flows_part(module: str) -> str:
    """A flows module's place in FLOWS_LAYERS: ``flows.cli.main`` -> flows.cli, ``flows.params.review`` ->
    flows.params, ``flows.ui`` -> flows.ui."""
    for package in ("flows.cli", "flows.params"):
        if module == package or module.startswith(f"{package}."):
            return package
    return module


def test_flows_point_down_their_layers_and_never_import_the_cli() -> None:
    rank = {m: i for i, layer in enumerate(FLOWS_LAYERS) for m in layer}
    modules = {flows_part(module_name(f)) for f in SOURCES if f.relative_to(ROOT).parts[0] == "flows"}
    assert modules - set(rank) == set(), "place each new flows module in FLOWS_LAYERS"
    offenders = []
    for f in SOURCES:
        here = flows_part(module_name(f))
        if not here.startswith("flows"):
            continue
        for line, target in project_imports(f):
            there = flows_part(target)
            if there.startswith("flows") and there != here and rank[there] >= rank[here]:
                offenders.append(f"{f.relative_to(ROOT)}:{line}: {here} -> {there}")
    assert not offenders, "flows imports that do not point down FLOWS_LAYERS:\n" + "\n".join(offenders)


def test_rtscore_source_never_imports_prefect_or_the_orchestration_layer() -> None:
    offenders = []
    for f in (ROOT / "rtscore").rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{f.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n.split(".")[0] in BANNED]
    assert not offenders, "\n".join(offenders)


def test_every_rtscore_directory_is_a_package_and_the_top_level_holds_few_modules() -> None:
    for d in [ROOT / "rtscore", *(p for p in (ROOT / "rtscore").rglob("*") if p.is_dir())]:
        if d.name != "__pycache__" and list(d.glob("*.py")):
            assert (d / "__init__.py").is_file(), f"{d.relative_to(ROOT)} has modules but no __init__.py"
    top = {p.name for p in (ROOT / "rtscore").glob("*.py")}
    assert top <= TOP_LEVEL_MODULES, f"new top-level modules {top - TOP_LEVEL_MODULES}: give them a subpackage"


def test_importing_every_rtscore_module_loads_no_prefect() -> None:
    code = (
        "import importlib, pkgutil, sys, rtscore\n"
        "names = [m.name for m in pkgutil.walk_packages(rtscore.__path__, 'rtscore.')]\n"
        "for n in names:\n"
        "    importlib.import_module(n)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('prefect', 'flows', 'tasks')]\n"
        "assert not bad, bad\n"
        "print(len(names))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, capture_output=True, text=True)
    walked = int(out.stdout.strip())
    assert walked == len(rtscore_modules()) - 1, "pkgutil must reach every module (rtscore itself aside)"


def test_no_import_cycle_counting_function_local_imports() -> None:
    graph = {name: imports_of(path, name)[0] - {name} for name, path in rtscore_modules().items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strongconnect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                cycles.append(sorted(scc))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            strongconnect(v)
    assert cycles == []


def test_project_imports_sit_at_module_top() -> None:
    """Function-local imports are for heavy third-party libraries only (torch, zarr, mlflow, ...)."""
    offenders = []
    for f in SOURCES:
        tree = ast.parse(f.read_text())
        top = set(tree.body)
        for block in tree.body:  # `if TYPE_CHECKING:` imports are type hints, not imports at run time
            if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test):
                top |= set(block.body)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom | ast.Import) and node not in top:
                names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                if any(n.split(".")[0] in ("rtscore", "flows", "tasks") for n in names) and not node.level:
                    offenders.append(f"{f.relative_to(ROOT)}:{node.lineno}")
    allowed = {f for f in offenders if f.startswith(("flows/cli/commands.py", "flows/cli/flow_commands.py"))}  # on use
    left = sorted(set(offenders) - allowed)
    assert not left, "\n".join(left)


def test_no_private_name_is_imported_across_packages() -> None:
    offenders = []
    for f in SOURCES:
        here = module_name(f)
        here_pkg = here if f.name == "__init__.py" else here.rpartition(".")[0]
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                continue
            if node.module.split(".")[0] not in ("rtscore", "flows", "tasks"):
                continue
            target_pkg = (
                node.module
                if module_file(node.module) and module_file(node.module).name == "__init__.py"
                else node.module.rpartition(".")[0]
            )  # type: ignore[union-attr]
            private = [a.name for a in node.names if a.name.startswith("_")]
            private_module = [p for p in node.module.split(".") if p.startswith("_")]
            inside = here_pkg == target_pkg or here_pkg.startswith(target_pkg + ".")
            if (private or private_module) and not inside:
                offenders.append(f"{f.relative_to(ROOT)}:{node.lineno}: from {node.module} import {private}")
    assert not offenders, "\n".join(offenders)


def run_names() -> tuple[set[str], set[str], set[str]]:
    """(file names, directory names, name prefixes) that rtscore/storage/layout.py spells: every name of its module
    constants and of every ``RunLayout`` entry; a prefix is the text before a placeholder (``seed_`` of
    ``seed_{seed}``; a part that starts with a placeholder, ``{split}.zarr``, names nothing by itself)."""
    templates = [v for k, v in vars(layout).items() if k.isupper() and isinstance(v, str)]
    templates += [e.template for e in vars(RunLayout).values() if isinstance(e, Entry)]
    files: set[str] = set()
    dirs: set[str] = set()
    prefixes: set[str] = set()
    for template in templates:
        for part in template.split("/"):
            literal = next(string.Formatter().parse(part), ("",))[0]  # the text before the first placeholder
            if literal == part:
                (files if "." in part else dirs).add(part)
            elif literal:
                prefixes.add(literal)
    return files, dirs, prefixes


def _path_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """Strings that look like paths (no spaces, not docstrings): constants, f-strings (a placeholder as ``{}``)
    and ``/`` chains of them (``run / "seeds" / f"seed_{n}"`` as ``{}/seeds/seed_{}``)."""
    docstrings = {
        id(n.body[0].value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and n.body
        and isinstance(n.body[0], ast.Expr)
        and isinstance(n.body[0].value, ast.Constant)
    }

    def chain(node: ast.expr) -> list[ast.expr]:
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return chain(node.left) + chain(node.right)
        return [node]

    def text(node: ast.expr) -> str | None:
        if isinstance(node, ast.Constant):
            return node.value if isinstance(node.value, str) else None
        if isinstance(node, ast.JoinedStr):
            return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
        return None

    inside = set()  # parts of an f-string or of a `/` chain: read as the whole they belong to
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            inside |= {id(n) for v in node.values for n in ast.walk(v)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            inside |= {id(n) for n in chain(node.left) + chain(node.right) if n is not node}
            inside |= {id(n) for n in (node.left, node.right)}
    out = []
    for node in ast.walk(tree):
        if id(node) in docstrings or id(node) in inside or not isinstance(node, ast.expr):
            continue
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            parts = [text(n) for n in chain(node)]
            s = "/".join("{}" if t is None else t for t in parts) if any(t is not None for t in parts) else None
        else:
            s = text(node)
        if s is not None and s.strip() and " " not in s.strip():
            out.append((node.lineno, s.strip()))
    return out


# Other layouts that share a file name with the run directory: their own files, not run-directory paths.
OTHER_LAYOUTS = {
    "rtscore/package/format.py": {"normalization_stats.json", "deployment_config.yaml"},  # the deployment package
    "rtscore/mapping/campaign.py": {"summary.json"},  # a map campaign's output directory
    "rtscore/data/geotiff/root.py": {"splits.yaml"},  # a data root's splits.yaml (docs/geotiff.md)
}


def run_path_literals() -> dict[str, list[str]]:
    """file -> its literals that spell a run-directory name outside rtscore/storage/layout.py: a file name as any
    part of a path, a directory name or a name prefix as a part of a path of two parts or more."""
    files, dirs, prefixes = run_names()
    found: dict[str, list[str]] = {}
    for f in SOURCES:
        rel = f.relative_to(ROOT).as_posix()
        if rel == "rtscore/storage/layout.py":
            continue
        for line, s in _path_literals(ast.parse(f.read_text())):
            parts = s.split("/")
            named = {p for p in parts if p in files}
            if len(parts) > 1:
                named |= {p for p in parts if p in dirs or p.startswith(tuple(prefixes))}
            if named and not named <= OTHER_LAYOUTS.get(rel, set()):
                found.setdefault(rel, []).append(f"{rel}:{line}: {s!r} names {sorted(named)}")
    return found


def test_run_names_are_read_from_the_layout() -> None:
    files, dirs, prefixes = run_names()
    assert {"best_deployment.pth", "logit_cache.zarr", "report.json", "report.md", ".verified"} <= files
    assert {"seeds", "calibration", "evaluation", "validation", "datasets", "package"} <= dirs
    assert {"seed_", "resume_epoch_", "pr_curves_1_"} <= prefixes
    spelled = [(line, s) for line, s in _path_literals(ast.parse('x = run / "seeds" / f"seed_{n}" / "a.pth"'))]
    assert spelled == [(1, "{}/seeds/seed_{}/a.pth")]


def test_no_run_directory_path_literal_outside_the_layout() -> None:
    found = run_path_literals()
    offenders = [o for lines in found.values() for o in lines]
    assert not offenders, "spell these through rtscore.storage.layout (RunLayout):\n" + "\n".join(offenders)


def test_cli_help_imports_nothing_heavy() -> None:
    code = (
        "import sys\n"
        "from flows.cli.main import parser\n"
        "parser().format_help()\n"
        "heavy = [m for m in ('torch', 'prefect', 'zarr', 'albumentations', 'mlflow', 'segmentation_models_pytorch')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


# ------------------------------------------------------------------------------------------- function size guard
# A function of rtscore, flows or tasks is at most MAX_FUNCTION_LINES long, def to last line, docstring included:
# about a screen, past which the functions here were found to mix several jobs (docs/development.md, "Function
# size"). A longer one is listed below with the most lines it may have and why; the list only shrinks. An entry
# marked "split pending" is backlog, not an allowance: it is to be split by concept.
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS: dict[str, tuple[int, str]] = {
    "rtscore/data/synthetic/_rts.py:_rts_geometry": (
        74,
        "one fixed order of random draws: a reorder changes every synthetic scene",
    ),
    "rtscore/data/synthetic/_scene.py:_place_rts": (
        68,
        "one fixed order of random draws: a reorder changes every synthetic scene",
    ),
}


def function_lengths() -> dict[str, int]:
    """``path:qualified name`` -> lines from ``def`` to the end, for every function and method in the sources."""
    out: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, path: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    out[f"{path}:{name}"] = child.end_lineno - child.lineno + 1
                visit(child, f"{name}.", path)

    for f in SOURCES:
        visit(ast.parse(f.read_text()), "", f.relative_to(ROOT).as_posix())
    return out


def test_functions_stay_short_or_are_listed_with_their_reason() -> None:
    lengths = function_lengths()
    too_long = [
        f"{name}: {n} lines (limit {LONG_FUNCTIONS.get(name, (MAX_FUNCTION_LINES,))[0]})"
        for name, n in sorted(lengths.items())
        if n > max(MAX_FUNCTION_LINES, LONG_FUNCTIONS.get(name, (0, ""))[0])
    ]
    assert not too_long, "functions over their limit: split them by concept\n" + "\n".join(too_long)
    stale = [name for name, (limit, _) in LONG_FUNCTIONS.items() if lengths.get(name, 0) < limit]
    assert not stale, "LONG_FUNCTIONS entries longer than their function (lower or remove them):\n" + "\n".join(stale)
    assert all(why.strip() for _, why in LONG_FUNCTIONS.values()), "every allowed long function says why"
