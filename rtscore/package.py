"""The deployment package (guide §4.3): build it from a run directory, audit and smoke-test it.

A package is a flat directory::

    package/
      weights.pth               EMA state_dict of the shipped seed (best_deployment.pth renamed)
      normalization_stats.json  channel-name bound mean/std (guide §4.5)
      deployment_config.yaml    calibrated threshold, temperature, tta, precision, ... (guide §4.6)
      model_config.yaml         architecture, backbone, channels, tile_size: what weights.pth fits
      run_metadata.json         git sha, MLflow run, seed, epoch, best metric, trained_with
      requirements_frozen.txt   name==version of every installed distribution
      SHA256SUMS                `sha256sum -c` lines for every other file

Everything but the weights is an inspectable text file, so :func:`verify_package` audits the whole package,
the pickle inside ``weights.pth`` included, without unpickling anything; only then does it load the weights
(``weights_only=True``) into the declared architecture and run one tile.
"""

from __future__ import annotations

import json
import math
import pickletools
import re
import shutil
import subprocess
import zipfile
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TypeVar

import yaml
from pydantic import BaseModel, Field, model_validator

from rtscore.config.base import ConfigError, StrictModel, config_hash, load_config, parse_config
from rtscore.config.deployment import DeploymentConfig, Precision
from rtscore.config.pipeline import RGB_NAMES, ExtraChannel, PipelineConfig
from rtscore.storage import RunDir, StorageError, sha256_file, staged_dir
from rtscore.train.result import METRIC, SeedResult

WEIGHTS = "weights.pth"
STATS = "normalization_stats.json"
DEPLOYMENT = "deployment_config.yaml"
MODEL = "model_config.yaml"
METADATA = "run_metadata.json"
REQUIREMENTS = "requirements_frozen.txt"
SUMS = "SHA256SUMS"
PACKAGE_FILES = (WEIGHTS, STATS, DEPLOYMENT, MODEL, METADATA, REQUIREMENTS, SUMS)

# What the pickle of a plain state_dict of tensors may reference (torch.save writes protocol 2 GLOBALs).
_STORAGE_TYPES = ("Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool")
ALLOWED_GLOBALS = frozenset(
    {
        "collections.OrderedDict",
        "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter",
        *(f"torch.{t}Storage" for t in _STORAGE_TYPES),
    }
)
_STRING_OPS = frozenset(
    {"SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE", "STRING", "BINSTRING", "SHORT_BINSTRING"}
)
_MEMO_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"})
_MEMO_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_NEUTRAL_OPS = frozenset({"PROTO", "FRAME"})
_SUMS_LINE = re.compile(r"^([0-9a-f]{64}) [ *](.+)$")
_REQUIREMENT_LINE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+-]*==\S+$")
_DETAIL_MAX = 600

T = TypeVar("T")
M = TypeVar("M", bound=StrictModel)


class PackageError(ValueError):
    """The package cannot be built from this run (missing or uncalibrated input, unknown seed, ...)."""


# --------------------------------------------------------------------------- package file schemas
class PackagedChannels(StrictModel):
    """Input channels in order: RGB, then the EXTRA bands (early fusion)."""

    rgb: list[str] = Field(..., description="RGB channel names; always ['R', 'G', 'B'].")
    extra: list[ExtraChannel] = Field(default_factory=list, description="EXTRA channels: name and band index.")

    @property
    def names(self) -> list[str]:
        return [*self.rgb, *(c.name for c in self.extra)]


class PackagedModelConfig(StrictModel):
    """`model_config.yaml`: the architecture ``weights.pth`` fits and the input it expects."""

    architecture: Literal["unetplusplus", "unet", "segformer"] = Field(..., description="smp architecture.")
    backbone: str = Field(..., min_length=1, description="smp encoder name.")
    decoder_channels: list[int] | None = Field(None, description="Decoder widths (null: smp's default).")
    in_channels: int = Field(..., ge=1, description="3 + number of EXTRA channels.")
    classes: Literal[1] = Field(1, description="One output channel.")
    output: Literal["logits"] = Field("logits", description="The model outputs logits (no activation).")
    channels: PackagedChannels = Field(..., description="Input channel binding.")
    tile_size: int = Field(..., ge=32, le=4096, description="Model input size (snapshot of data.tile_size).")

    @model_validator(mode="after")
    def _consistent(self) -> PackagedModelConfig:
        if self.channels.rgb != list(RGB_NAMES):
            raise ValueError(f"channels.rgb must be {list(RGB_NAMES)}; got {self.channels.rgb}")
        if self.in_channels != len(self.channels.names):
            raise ValueError(
                f"in_channels ({self.in_channels}) differs from the {len(self.channels.names)} declared channels "
                f"{self.channels.names}"
            )
        return self


class TrainedWith(StrictModel):
    precision: Precision = Field(..., description="training.precision (must equal the deployment precision).")
    seed: int = Field(..., description="Training seed.")
    config_sha: str = Field(..., min_length=64, max_length=64, description="config_hash of the pipeline config.")


class RunMetadata(StrictModel):
    """`run_metadata.json`: where the weights come from."""

    git_sha: str = Field(..., description="Commit of the project checkout that built the package, or 'unknown'.")
    git_dirty: bool | None = Field(None, description="Uncommitted changes to tracked files (null: unknown).")
    mlflow_run_id: str | None = Field(None, description="MLflow run of the shipped seed.")
    training_date: str = Field(..., description="UTC time the shipped weights were written (ISO 8601).")
    package_date: str = Field(..., description="UTC time the package was built (ISO 8601).")
    seed: int = Field(..., description="Shipped seed.")
    epoch: int = Field(..., description="Epoch of the shipped (best) weights.")
    best_metric: float | None = Field(..., description="Best smoothed validation metric of the seed.")
    best_metric_name: str = Field(METRIC, description="Name of best_metric.")
    trained_with: TrainedWith = Field(..., description="Training settings the weights depend on.")


class PackageFile(BaseModel):
    name: str = Field(..., description="File name inside the package.")
    sha256: str = Field(..., description="sha256 of the file.")
    bytes: int = Field(..., ge=0, description="Size in bytes.")


class PackageInfo(BaseModel):
    """What :func:`build_package` built."""

    path: str = Field(..., description="The published package directory.")
    seed: int = Field(..., description="Shipped seed.")
    files: list[PackageFile] = Field(..., description="Every file of the package (SHA256SUMS last).")


class Check(BaseModel):
    name: str = Field(..., description="What was checked.")
    ok: bool = Field(..., description="Whether it passed.")
    detail: str = Field("", description="What was found; on failure, the file and the problem.")


class VerifyReport(BaseModel):
    """Result of :func:`verify_package`: every check, in order."""

    path: str = Field(..., description="The package directory.")
    ok: bool = Field(..., description="True when every check passed.")
    checks: list[Check] = Field(default_factory=list, description="The checks, audit first, then load/forward.")

    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


# --------------------------------------------------------------------------- helpers
def _utc(ts: float | None = None) -> str:
    dt = datetime.now(UTC) if ts is None else datetime.fromtimestamp(ts, UTC)
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


def _git_state() -> tuple[str, bool | None]:
    """(HEAD sha, dirty) of the checkout rtscore runs from; ('unknown', None) outside a git checkout."""
    root = Path(__file__).resolve().parents[1]
    try:
        sha = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown", None
    return (sha, bool(status.strip())) if re.fullmatch(r"[0-9a-f]{40,64}", sha) else ("unknown", None)


def frozen_requirements() -> list[str]:
    """``name==version`` of every installed distribution, sorted by name (no pip subprocess)."""
    seen: dict[str, str] = {}
    for dist in metadata.distributions():
        name = dist.metadata["Name"] if dist.metadata else None
        if name and name.lower() not in seen:
            seen[name.lower()] = f"{name}=={dist.version}"
    return [seen[k] for k in sorted(seen)]


def write_sha256sums(directory: Path) -> list[PackageFile]:
    """Write ``SHA256SUMS`` (``sha256sum -c`` format) for every other file of ``directory``."""
    files = [
        PackageFile(name=p.name, sha256=sha256_file(p), bytes=p.stat().st_size)
        for p in sorted(directory.iterdir())
        if p.is_file() and p.name != SUMS
    ]
    (directory / SUMS).write_text("".join(f"{f.sha256}  {f.name}\n" for f in files))
    return files


def load_seed_results(run: RunDir) -> list[SeedResult]:
    """The trained seeds of a run from ``seeds/summary.json``."""
    path = run.path("seeds/summary.json")
    if not path.is_file():
        raise PackageError(f"{path} not found; train the seeds first (multi-seed training writes it)")
    try:
        doc = json.loads(path.read_text())
        results = [SeedResult.model_validate(s) for s in doc["seeds"]]
    except (ValueError, KeyError, TypeError) as err:
        raise PackageError(f"{path} is not a valid seed summary: {type(err).__name__}: {err}") from None
    if not results:
        raise PackageError(f"{path} lists no trained seeds")
    return results


def choose_seed(results: Sequence[SeedResult], seed: int | None) -> SeedResult:
    """The requested seed, else the best ``best_metric`` (ties: the lowest seed; NaN never wins)."""
    by_seed = {r.seed: r for r in results}
    if seed is not None:
        if seed not in by_seed:
            raise PackageError(f"seed {seed} was not trained in this run; trained seeds: {sorted(by_seed)}")
        return by_seed[seed]

    def key(r: SeedResult) -> tuple[float, int]:
        return (r.best_metric if math.isfinite(r.best_metric) else -math.inf, -r.seed)

    return max(results, key=key)


def _check_manifest(run: RunDir, rel: str) -> None:
    """Inputs recorded in the run's manifest must still match their record."""
    if run.entry(rel) is not None:
        run.verify(rel)


def _model_config(cfg: PipelineConfig) -> PackagedModelConfig:
    return PackagedModelConfig(
        architecture=cfg.model.architecture,
        backbone=cfg.model.backbone,
        decoder_channels=cfg.model.decoder_channels,
        in_channels=cfg.channels.count,
        channels=PackagedChannels(rgb=list(RGB_NAMES), extra=list(cfg.channels.extra)),
        tile_size=cfg.data.tile_size,
    )


# --------------------------------------------------------------------------- build
def build_package(run_dir: str | Path, cfg: PipelineConfig, *, seed: int | None = None) -> PackageInfo:
    """Assemble ``<run>/package/`` from one seed's weights and calibration (published atomically).

    The seed is ``seed``, else ``cfg.package.seed``, else the best ``best_metric`` of ``seeds/summary.json``.
    Every input is checked before anything is written, and the staged package is audited (as by
    :func:`verify_package`, without the model load) before it replaces a previous one.
    """
    from rtscore.data.normalization import load_normalization_stats

    run = RunDir(run_dir)
    run.fetch("seeds/summary.json")  # inputs recorded in the manifest: a gs:// run stages verified copies
    result = choose_seed(load_seed_results(run), seed if seed is not None else cfg.package.seed)
    n = result.seed
    weights_rel, cal_rel = f"seeds/seed_{n}/best_deployment.pth", f"calibration/seed_{n}/{DEPLOYMENT}"
    for rel in (weights_rel, cal_rel, "normalization_stats.json"):
        run.fetch(rel)
    weights, calibration, stats = run.path(weights_rel), run.path(cal_rel), run.normalization_stats
    if not weights.is_file():
        raise PackageError(f"weights of seed {n} not found: {weights} (was the seed's training completed?)")
    if not calibration.is_file():
        raise PackageError(f"deployment config of seed {n} not found: {calibration}; run calibrate first")
    dep = load_config(DeploymentConfig, calibration)
    missing = [k for k in ("threshold", "temperature") if getattr(dep, k) is None]
    if missing:
        raise PackageError(f"{calibration}: {' and '.join(missing)} null (not calibrated); run calibrate first")
    if dep.precision != cfg.training.precision:
        raise PackageError(
            f"{calibration}: precision {dep.precision} differs from training.precision {cfg.training.precision} "
            "(guide §4.6: calibration and deployment must run at the training precision)"
        )
    load_normalization_stats(stats, [c.name for c in cfg.channels.extra])  # the channel binding (guide §4.5)
    for rel in (weights_rel, cal_rel, "normalization_stats.json"):
        _check_manifest(run, rel)

    git_sha, git_dirty = _git_state()
    meta = RunMetadata(
        git_sha=git_sha,
        git_dirty=git_dirty,
        mlflow_run_id=result.mlflow_run_id,
        training_date=_utc(weights.stat().st_mtime),
        package_date=_utc(),
        seed=n,
        epoch=result.best_epoch,
        best_metric=result.best_metric if math.isfinite(result.best_metric) else None,
        trained_with=TrainedWith(precision=cfg.training.precision, seed=n, config_sha=config_hash(cfg)),
    )
    final = run.path("package")
    with staged_dir(final) as tmp:
        shutil.copyfile(weights, tmp / WEIGHTS)
        shutil.copyfile(stats, tmp / STATS)
        shutil.copyfile(calibration, tmp / DEPLOYMENT)
        (tmp / MODEL).write_text(yaml.safe_dump(_model_config(cfg).model_dump(mode="json"), sort_keys=False))
        (tmp / METADATA).write_text(meta.model_dump_json(indent=2) + "\n")
        (tmp / REQUIREMENTS).write_text("\n".join(frozen_requirements()) + "\n")
        files = write_sha256sums(tmp)
        failed = [c for c in audit_package(tmp) if not c.ok]
        if failed:
            lines = "\n".join(f"  {c.name}: {c.detail}" for c in failed)
            raise PackageError(f"the package built from {run.root} (seed {n}) fails its audit:\n{lines}")
    files.append(PackageFile(name=SUMS, sha256=sha256_file(final / SUMS), bytes=(final / SUMS).stat().st_size))
    return PackageInfo(path=str(final), seed=n, files=files)


# --------------------------------------------------------------------------- audit (no unpickling)
def pickle_globals(data: bytes) -> tuple[list[str], list[str]]:
    """(globals referenced, problems) of a pickle, read from its opcodes only (nothing is executed).

    GLOBAL/INST name their target in the opcode; STACK_GLOBAL takes it from the two strings pushed right
    before it (directly or from the memo). Anything less plain (a STACK_GLOBAL whose operands are not such
    strings, extension-registry opcodes) is a problem: a state_dict written by torch.save never needs it.
    """
    found: list[str] = []
    problems: list[str] = []
    memo: dict[int, str | None] = {}
    recent: list[str | None] = []  # what the last value-producing opcodes pushed (None: not a plain string)
    try:
        for op, arg, pos in pickletools.genops(data):
            name = op.name
            if name in ("GLOBAL", "INST"):
                module, _, attr = str(arg).partition(" ")
                found.append(f"{module}.{attr}")
                recent.append(None)
            elif name == "STACK_GLOBAL":
                if len(recent) >= 2 and isinstance(recent[-2], str) and isinstance(recent[-1], str):
                    found.append(f"{recent[-2]}.{recent[-1]}")
                else:
                    problems.append(f"STACK_GLOBAL at byte {pos} with operands that are not plain strings")
                recent.append(None)
            elif name in ("EXT1", "EXT2", "EXT4"):
                problems.append(f"{name} (copyreg extension registry reference {arg}) at byte {pos}")
                recent.append(None)
            elif name in _STRING_OPS:
                recent.append(arg if isinstance(arg, str) else None)
            elif name in _MEMO_PUT_OPS:
                memo[len(memo) if name == "MEMOIZE" else int(arg)] = recent[-1] if recent else None
            elif name in _MEMO_GET_OPS:
                recent.append(memo.get(int(arg)))
            elif name not in _NEUTRAL_OPS:
                recent.append(None)
            del recent[:-2]
    except ValueError as err:
        problems.append(f"malformed pickle: {err}")
    return found, problems


def audit_weights(path: Path) -> Check:
    """``weights.pth`` is a torch zip archive whose pickles reference only :data:`ALLOWED_GLOBALS`."""
    name = f"{WEIGHTS} pickle"
    if not path.is_file():
        return Check(name=name, ok=False, detail=f"{path.name}: missing")
    if not zipfile.is_zipfile(path):
        return Check(name=name, ok=False, detail=f"{path.name}: not a torch zip archive (legacy or other format)")
    try:
        with zipfile.ZipFile(path) as z:
            members = z.namelist()
            data_pkls = [m for m in members if re.fullmatch(r"[^/]+/data\.pkl", m)]
            if len(data_pkls) != 1:
                return Check(
                    name=name, ok=False, detail=f"{path.name}: expected one <archive>/data.pkl; found {data_pkls}"
                )
            pickles = {m: z.read(m) for m in members if m.endswith(".pkl")}
    except (zipfile.BadZipFile, OSError) as err:
        return Check(name=name, ok=False, detail=f"{path.name}: unreadable zip archive: {err}")
    bad: list[str] = []
    count = 0
    for member, data in pickles.items():
        found, problems = pickle_globals(data)
        count += len(found)
        bad += [f"{member}: {p}" for p in problems]
        disallowed = sorted({g for g in found if g not in ALLOWED_GLOBALS})
        if disallowed:
            bad.append(f"{member}: references non-allowed globals {disallowed}")
    if bad:
        return Check(name=name, ok=False, detail=f"{path.name}: " + "; ".join(bad))
    return Check(name=name, ok=True, detail=f"{len(pickles)} pickle(s), {count} global references, all allowed")


def _check(name: str, fn: Callable[[], tuple[str, T]]) -> tuple[Check, T | None]:
    """Run ``fn() -> (detail, value)`` as a check; known errors become a failed check with their message."""
    try:
        detail, value = fn()
    except (ConfigError, StorageError, ValueError, OSError, KeyError, TypeError) as err:
        return Check(name=name, ok=False, detail=_short(str(err))), None
    return Check(name=name, ok=True, detail=detail), value


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 3] + "..."


def _files_check(pkg: Path) -> Check:
    present = sorted(p.name for p in pkg.iterdir())
    missing = [f for f in PACKAGE_FILES if not (pkg / f).is_file()]
    unexpected = [f for f in present if f not in PACKAGE_FILES or not (pkg / f).is_file()]
    problems = ([f"missing {missing}"] if missing else []) + ([f"unexpected {unexpected}"] if unexpected else [])
    if problems:
        return Check(name="files", ok=False, detail=f"{pkg}: " + "; ".join(problems))
    return Check(name="files", ok=True, detail=f"{len(PACKAGE_FILES)} files")


def _sums_check(pkg: Path) -> Check:
    name = SUMS
    path = pkg / SUMS
    if not path.is_file():
        return Check(name=name, ok=False, detail=f"{SUMS}: missing")
    listed: dict[str, str] = {}
    problems: list[str] = []
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        m = _SUMS_LINE.match(line)
        if m is None:
            problems.append(f"line {i} is not '<sha256>  <file>'")
        elif m.group(2) in listed:
            problems.append(f"{m.group(2)} listed twice")
        else:
            listed[m.group(2)] = m.group(1)
    others = sorted(p.name for p in pkg.iterdir() if p.name != SUMS)
    expected = [f for f in PACKAGE_FILES if f != SUMS]
    for f in sorted(set(listed) - set(others)):
        problems.append(f"lists {f}, which is not in the package")
    for f in sorted(set(expected) - set(listed)):
        problems.append(f"does not list {f}")
    for f in sorted(set(listed) - set(expected)):
        problems.append(f"lists {f}, which is not a package file")
    for f in sorted(set(others) - set(listed)):
        if f not in expected:
            problems.append(f"does not list {f}")
    for f, want in sorted(listed.items()):
        p = pkg / f
        if f in others and p.is_file() and (got := sha256_file(p)) != want:
            problems.append(f"{f}: sha256 mismatch (file {got[:12]}..., listed {want[:12]}...)")
    if problems:
        return Check(name=name, ok=False, detail=_short(f"{SUMS}: " + "; ".join(problems)))
    return Check(name=name, ok=True, detail=f"{len(listed)} files match")


def _load_deployment(path: Path) -> tuple[str, DeploymentConfig]:
    dep = load_config(DeploymentConfig, path)
    missing = [k for k in ("threshold", "temperature") if getattr(dep, k) is None]
    if missing:
        raise ValueError(f"{path.name}: {' and '.join(missing)} null (not calibrated); run calibrate first")
    return (
        f"threshold {dep.threshold:g}, T {dep.temperature:g}, tta {dep.tta}, {dep.precision}, scales {dep.scales}",
        dep,
    )


def _load_json_model(model: type[M], path: Path) -> M:
    if not path.is_file():
        raise ValueError(f"{path.name}: missing")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path.name} is not valid JSON: {err}") from None
    return parse_config(model, data, source=path.name)


def _load_model_config(path: Path) -> tuple[str, PackagedModelConfig]:
    if not path.is_file():
        raise ValueError(f"{path.name}: missing")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ValueError(f"{path.name} is not valid YAML: {err}") from None
    mc = parse_config(PackagedModelConfig, data, source=path.name)
    return f"{mc.architecture}/{mc.backbone}, {mc.in_channels} channels {mc.channels.names}, tile {mc.tile_size}", mc


def _load_stats(path: Path) -> tuple[str, list[str]]:
    from rtscore.data.normalization import load_normalization_stats

    if not path.is_file():
        raise ValueError(f"{path.name}: missing")
    try:
        doc = json.loads(path.read_text())
    except ValueError as err:
        raise ValueError(f"{path.name} is not valid JSON: {err}") from None
    extra = doc.get("extra", {}).get("channel_names", []) if isinstance(doc, dict) else []
    stats = load_normalization_stats(path, extra if isinstance(extra, list) else [])
    return f"channels {stats.channel_names}", stats.channel_names


def _load_requirements(path: Path) -> tuple[str, int]:
    if not path.is_file():
        raise ValueError(f"{path.name}: missing")
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    bad = [ln for ln in lines if not _REQUIREMENT_LINE.match(ln)]
    if bad:
        raise ValueError(f"{path.name}: lines not of the form name==version: {bad[:5]}")
    if not lines:
        raise ValueError(f"{path.name}: empty")
    return f"{len(lines)} pinned distributions", len(lines)


def audit_package(path: str | Path) -> list[Check]:
    """Every check that needs no unpickling: files, checksums, config files, channel binding, weights' pickle."""
    pkg = Path(path)
    if not pkg.is_dir():
        return [Check(name="files", ok=False, detail=f"{pkg}: package directory not found")]
    checks = [_files_check(pkg), _sums_check(pkg)]
    c, dep = _check(DEPLOYMENT, lambda: _load_deployment(pkg / DEPLOYMENT))
    checks.append(c)
    c, model = _check(MODEL, lambda: _load_model_config(pkg / MODEL))
    checks.append(c)
    c, stats_names = _check(STATS, lambda: _load_stats(pkg / STATS))
    checks.append(c)
    if model is not None and stats_names is not None:
        if stats_names == model.channels.names:
            checks.append(Check(name="channel binding", ok=True, detail=f"{STATS} = {MODEL}: {stats_names}"))
        else:
            checks.append(
                Check(
                    name="channel binding",
                    ok=False,
                    detail=f"{STATS} channels {stats_names} differ from {MODEL} channels {model.channels.names}",
                )
            )
    else:
        checks.append(Check(name="channel binding", ok=False, detail=f"skipped: {STATS} or {MODEL} is invalid"))

    def meta_fn() -> tuple[str, RunMetadata]:
        m = _load_json_model(RunMetadata, pkg / METADATA)
        return f"seed {m.seed}, epoch {m.epoch}, git {m.git_sha[:12]}, trained {m.training_date}", m

    c, meta = _check(METADATA, meta_fn)
    checks.append(c)
    if dep is not None and meta is not None:
        same = dep.precision == meta.trained_with.precision
        detail = (
            f"{DEPLOYMENT} precision {dep.precision} "
            + ("= " if same else "differs from ")
            + f"{METADATA} trained_with.precision {meta.trained_with.precision}"
        )
        checks.append(Check(name="precision parity", ok=same, detail=detail))
    else:
        checks.append(Check(name="precision parity", ok=False, detail=f"skipped: {DEPLOYMENT} or {METADATA} invalid"))
    checks.append(_check(REQUIREMENTS, lambda: _load_requirements(pkg / REQUIREMENTS))[0])
    checks.append(audit_weights(pkg / WEIGHTS))
    return checks


# --------------------------------------------------------------------------- load + one tile
def load_weights(pkg: Path, mc: PackagedModelConfig) -> tuple[Any, dict[str, Any]]:
    """The package's declared architecture with ``weights.pth`` loaded (``weights_only=True``, strict), and the
    state_dict.

    Raises:
        TypeError: The file is not a state_dict; or whatever torch raises for a mismatch.
    """
    import torch

    from rtscore.config.pipeline import ChannelsConfig, ModelConfig
    from rtscore.models import build_model

    state = torch.load(pkg / WEIGHTS, map_location="cpu", weights_only=True)
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise TypeError("not a state_dict (a mapping of parameter names to tensors)")
    model = build_model(
        ModelConfig(
            architecture=mc.architecture,
            backbone=mc.backbone,
            encoder_weights=None,
            decoder_channels=mc.decoder_channels,
        ),
        ChannelsConfig(extra=mc.channels.extra),
    )
    model.load_state_dict(state, strict=True)
    return model, state


def _load_and_run(pkg: Path, device: str) -> list[Check]:
    """Load ``weights.pth`` (weights_only) into the declared model, strictly, and run one seeded random tile."""
    import torch

    mc = _load_model_config(pkg / MODEL)[1]
    dep = _load_deployment(pkg / DEPLOYMENT)[1]
    try:
        model, state = load_weights(pkg, mc)
    except Exception as err:
        return [
            Check(name="load", ok=False, detail=_short(f"{WEIGHTS} into {MODEL}: {type(err).__name__}: {err}")),
            Check(name="forward", ok=False, detail="skipped: the weights did not load"),
        ]
    n_params = sum(v.numel() for v in state.values())
    checks = [
        Check(
            name="load",
            ok=True,
            detail=f"{len(state)} tensors ({n_params:,} values) into {mc.architecture}/{mc.backbone}, strict",
        )
    ]
    try:
        dev = torch.device(device)
        note = ""
        precision = dep.precision
        if precision == "fp16" and dev.type == "cpu":
            precision, note = "fp32", " (fp16 has no CPU autocast: ran in fp32)"
        shape = (1, mc.in_channels, mc.tile_size, mc.tile_size)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dev)
        model = model.to(dev).eval()
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
        with torch.inference_mode(), torch.autocast(dev.type, dtype=dtype, enabled=dtype is not None):
            out = model(x)
        want = (1, 1, mc.tile_size, mc.tile_size)
        if tuple(out.shape) != want:
            raise ValueError(f"output shape {tuple(out.shape)}, expected {want}")
        out32 = out.float()
        if not bool(torch.isfinite(out32).all()):
            raise ValueError(f"output holds {int((~torch.isfinite(out32)).sum())} non-finite values")
        detail = (
            f"{precision} on {dev}{note}: output {tuple(out.shape)} {str(out.dtype).removeprefix('torch.')}, "
            f"finite, logits in [{out32.min().item():.3g}, {out32.max().item():.3g}]"
        )
        checks.append(Check(name="forward", ok=True, detail=detail))
    except Exception as err:
        checks.append(
            Check(name="forward", ok=False, detail=_short(f"one tile on {device}: {type(err).__name__}: {err}"))
        )
    return checks


def verify_package(path: str | Path, *, device: str = "cpu") -> VerifyReport:
    """Audit a package without unpickling anything; if that passes, load the weights and run one tile."""
    pkg = Path(path)
    checks = audit_package(pkg)
    if all(c.ok for c in checks):
        checks += _load_and_run(pkg, device)
    else:
        checks += [
            Check(name="load", ok=False, detail="skipped: the audit failed (weights are never loaded then)"),
            Check(name="forward", ok=False, detail="skipped: the audit failed"),
        ]
    return VerifyReport(path=str(pkg), ok=all(c.ok for c in checks), checks=checks)


def render_verify_report(report: VerifyReport) -> str:
    """A compact table of the checks and the verdict."""
    width = max(len(c.name) for c in report.checks)
    lines = [f"package {report.path}"]
    lines += [f"  {'ok  ' if c.ok else 'FAIL'}  {c.name:<{width}}  {c.detail}" for c in report.checks]
    failed = report.failures()
    lines.append("verdict: OK" if report.ok else f"verdict: FAILED ({len(failed)} of {len(report.checks)} checks)")
    return "\n".join(lines)
