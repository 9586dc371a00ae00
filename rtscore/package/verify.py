"""Auditing and verifying a deployment package (`rts package verify`): the audit never unpickles anything;
only a package that passes it is loaded (``weights_only=True``) into its declared architecture and run on
one tile. Re-exported by `rtscore.package`.

The audit is also the one gate of every use of a package: :func:`audited_package` runs it (once per process per
package, while its files are unchanged) for ``rts predict``, ``rts map``, ``rts drift`` and the mapping flows, which
load a package only through it.
"""

from __future__ import annotations

import json
import logging
import os
import pickletools
import re
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from rtscore.config.base import ConfigError, StrictModel, load_config, parse_config, parse_yaml
from rtscore.config.deployment import DeploymentConfig, require_calibrated
from rtscore.data.normalization.stats import NormalizationStats, load_normalization_stats
from rtscore.data.raster.warp import TrainedOn
from rtscore.models import load_model
from rtscore.package.format import (
    DEPLOYMENT,
    METADATA,
    MODEL,
    PACKAGE_FILES,
    REQUIREMENTS,
    STATS,
    SUMS,
    WEIGHTS,
    Check,
    PackagedModelConfig,
    PackageError,
    RunMetadata,
    VerifyReport,
)
from rtscore.runtime import forward_logits, inference_precision
from rtscore.storage import StorageError, sha256_file

if TYPE_CHECKING:
    import torch

T = TypeVar("T")
M = TypeVar("M", bound=StrictModel)

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

log = logging.getLogger(__name__)


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
                memo[len(memo) if name == "MEMOIZE" else _memo_index(arg)] = recent[-1] if recent else None
            elif name in _MEMO_GET_OPS:
                recent.append(memo.get(_memo_index(arg)))
            elif name not in _NEUTRAL_OPS:
                recent.append(None)
            del recent[:-2]
    except ValueError as err:
        problems.append(f"malformed pickle: {err}")
    return found, problems


def _memo_index(arg: object) -> int:
    """The memo index of a PUT/GET opcode (pickletools decodes it as an int; anything else is malformed)."""
    if not isinstance(arg, int):
        raise ValueError(f"memo opcode with index {arg!r}")
    return int(arg)


def audit_weights(path: Path) -> Check:
    """``weights.pth`` is an intact torch zip archive (every member matches its CRC-32) whose pickles reference
    only :data:`ALLOWED_GLOBALS`."""
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
            # Each member's CRC-32 as torch.save wrote it: an altered tensor whose SHA256SUMS was regenerated
            # still fails here (torch.load itself never checks them).
            corrupt = z.testzip()
            if corrupt is not None:
                return Check(
                    name=name,
                    ok=False,
                    detail=f"{path.name}: member {corrupt} fails its CRC-32 check (altered or corrupt after it was "
                    "written); rebuild the package from the run",
                )
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


def read_deployment_config(path: Path) -> DeploymentConfig:
    """A package's ``deployment_config.yaml``, which calibration must have frozen, with its numerics still the
    calibrated ones (:func:`~rtscore.config.deployment.require_calibrated`; ``rts predict`` loads it here too)."""
    return require_calibrated(load_config(DeploymentConfig, path), path.name)


def threshold_source_check(dep: DeploymentConfig, *, allow_fallback_threshold: bool) -> Check:
    """A max-F1 fallback threshold (the target precision was unreachable) fails unless explicitly allowed."""
    name = "threshold source"
    if dep.threshold_source == "target_precision":
        return Check(name=name, ok=True, detail="target_precision: the threshold reaches the calibration target")
    detail = (
        f"{DEPLOYMENT} threshold_source {dep.threshold_source}: the target precision was not reachable on "
        "Val-Realistic and the max-F1 threshold shipped (calibration.allow_max_f1_fallback)"
    )
    if allow_fallback_threshold:
        return Check(name=name, ok=True, detail=f"{detail}; allowed by --allow-fallback-threshold")
    return Check(name=name, ok=False, detail=f"{detail}; pass --allow-fallback-threshold to accept it")


def _load_deployment(path: Path) -> tuple[str, DeploymentConfig]:
    dep = read_deployment_config(path)
    return (
        f"threshold {dep.threshold:g}, T {dep.temperature:g}, tta {dep.tta}, {dep.precision}, scales {dep.scales}",
        dep,
    )


def _load_json_model(model: type[M], path: Path) -> M:
    if not path.is_file():
        raise PackageError(f"{path.name}: missing")
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise PackageError(f"{path.name} is not valid JSON: {err}") from None
    return parse_config(model, data, source=path.name)


def read_model_config(path: Path) -> PackagedModelConfig:
    """A package's ``model_config.yaml`` (architecture, channels, tile size), read as every config file is
    (:func:`~rtscore.config.base.parse_yaml`: a key given twice is refused, not silently the last one)."""
    if not path.is_file():
        raise PackageError(f"{path.name}: missing")
    return parse_config(PackagedModelConfig, parse_yaml(path.read_text(), path.name), source=path.name)


def trained_on(package: str | Path) -> TrainedOn:
    """What `rts warp --package` checks a tiling config against: the package's raster contract and the EXTRA
    channels its model reads, from its ``model_config.yaml``."""
    pkg = Path(package)
    mc = read_model_config(pkg / MODEL)
    return TrainedOn(contract=mc.contract, extra=list(mc.channels.extra), where=f"package {pkg} ({MODEL})")


def _load_model_config(path: Path) -> tuple[str, PackagedModelConfig]:
    mc = read_model_config(path)
    summary = f"{mc.architecture}/{mc.backbone}, {mc.in_channels} channels {mc.channels.names}, tile {mc.tile_size}"
    return f"{summary}; {describe_contract(mc)}; {describe_min_object_area(mc)}", mc


def describe_contract(mc: PackagedModelConfig) -> str:
    """One line on the raster contract inputs are checked against (and whether the package records it)."""
    c = mc.contract
    size = "pixel size not checked" if c.pixel_size is None else f"{c.pixel_size:g} ±{c.pixel_size_tolerance:.0%}"
    bands = "by colour interpretation" if c.rgb_bands is None else f"bands {c.rgb_bands.rgb}, alpha {c.rgb_bands.alpha}"
    where = "raster" if mc.raster is not None else "raster not recorded (older package), read as"
    return f"{where}: {c.crs or 'any CRS'}, {size}, {c.rgb_dtype} RGB {bands}, {c.extra_dtype} EXTRA"


def describe_min_object_area(mc: PackagedModelConfig) -> str:
    """The smallest object `rts map` writes (and whether the package records it)."""
    area = f"{mc.effective_min_object_area_m2:g} m²"
    if mc.min_object_area_m2 is None:
        return f"min object area not recorded (older package), mapped at the default {area}"
    return f"min object area {area}"


def _load_stats(path: Path) -> tuple[str, NormalizationStats]:
    if not path.is_file():
        raise PackageError(f"{path.name}: missing")
    try:
        doc = json.loads(path.read_text())
    except ValueError as err:
        raise PackageError(f"{path.name} is not valid JSON: {err}") from None
    extra = doc.get("extra", {}).get("channel_names", []) if isinstance(doc, dict) else []
    stats = load_normalization_stats(path, extra if isinstance(extra, list) else [])
    return f"channels {stats.channel_names}", stats


def _binding_check(model: PackagedModelConfig, stats: NormalizationStats) -> Check:
    """The stats are bound to the model's channels by name and, where the stats record them, by EXTRA band."""
    names, bands = stats.channel_names, stats.extra_bands
    model_bands = model.channels.binding.extra_bands
    if names != model.channels.names:
        detail = f"{STATS} channels {names} differ from {MODEL} channels {model.channels.names}"
        return Check(name="channel binding", ok=False, detail=detail)
    if bands is not None and bands != model_bands:
        detail = f"{STATS} was computed from EXTRA bands {bands}; {MODEL} reads bands {model_bands}"
        return Check(name="channel binding", ok=False, detail=detail)
    shown = f"{names}, EXTRA bands {model_bands}" if model_bands else f"{names}"
    return Check(name="channel binding", ok=True, detail=f"{STATS} = {MODEL}: {shown}")


def _load_requirements(path: Path) -> tuple[str, int]:
    if not path.is_file():
        raise PackageError(f"{path.name}: missing")
    lines = [ln.strip() for ln in path.read_text().splitlines() if ln.strip()]
    bad = [ln for ln in lines if not _REQUIREMENT_LINE.match(ln)]
    if bad:
        raise PackageError(f"{path.name}: lines not of the form name==version: {bad[:5]}")
    if not lines:
        raise PackageError(f"{path.name}: empty")
    return f"{len(lines)} pinned distributions", len(lines)


@dataclass(frozen=True)
class Audit:
    """The checks of :func:`audit_package` and the package files they parsed (None where a file is invalid)."""

    checks: list[Check]
    deployment: DeploymentConfig | None = None
    model_config: PackagedModelConfig | None = None
    stats: NormalizationStats | None = None


def audit_package(path: str | Path, *, allow_fallback_threshold: bool = False) -> list[Check]:
    """Every check that needs no unpickling: files, checksums, config files (with the parity of the deployment
    numerics and the threshold's source), channel binding, weights' pickle."""
    return run_audit(path, allow_fallback_threshold=allow_fallback_threshold).checks


def run_audit(path: str | Path, *, allow_fallback_threshold: bool = False) -> Audit:
    """:func:`audit_package`'s checks, with the files it parsed."""
    pkg = Path(path)
    if not pkg.is_dir():
        return Audit([Check(name="files", ok=False, detail=f"{pkg}: package directory not found")])
    checks = [_files_check(pkg), _sums_check(pkg)]
    c, dep = _check(DEPLOYMENT, lambda: _load_deployment(pkg / DEPLOYMENT))
    checks.append(c)
    if dep is not None:
        checks.append(threshold_source_check(dep, allow_fallback_threshold=allow_fallback_threshold))
    c, model = _check(MODEL, lambda: _load_model_config(pkg / MODEL))
    checks.append(c)
    c, stats = _check(STATS, lambda: _load_stats(pkg / STATS))
    checks.append(c)
    if model is not None and stats is not None:
        checks.append(_binding_check(model, stats))
    else:
        checks.append(Check(name="channel binding", ok=False, detail=f"skipped: {STATS} or {MODEL} is invalid"))

    def meta_fn() -> tuple[str, RunMetadata]:
        m = _load_json_model(RunMetadata, pkg / METADATA)
        source = f" ({m.git_source})" if m.git_source else ""
        return f"seed {m.seed}, epoch {m.epoch}, git {m.git_sha[:12]}{source}, trained {m.training_date}", m

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
    return Audit(checks, dep, model, stats)


# --------------------------------------------------------------------------- the gate of every use
@dataclass(frozen=True)
class AuditedPackage:
    """A package that passed the audit of ``rts package verify`` (a fallback threshold allowed: it is a warning on
    each use, :func:`warn_if_fallback_threshold`), with the files the audit parsed: what predict, map and drift
    use, so they never read a file the audit did not check."""

    path: Path
    deployment: DeploymentConfig
    model_config: PackagedModelConfig
    stats: NormalizationStats

    @property
    def threshold_source(self) -> str:
        return str(self.deployment.threshold_source)

    @property
    def fallback_threshold(self) -> bool:
        """Whether the threshold is calibration's max-F1 fallback (the target precision was not reachable)."""
        return self.deployment.threshold_source != "target_precision"


_Signature = tuple[tuple[str, int, int, int, int], ...]
_audits: dict[str, tuple[_Signature, Audit]] = {}  # by the package's real path: its files' stat, its audit
_audits_lock = threading.Lock()


def _signature(pkg: Path) -> _Signature | None:
    """A cheap stat of every entry of the package directory (name, size, mtime, ctime, inode): any write, rename
    or replacement of a file changes it. None when the directory cannot be listed."""
    try:
        with os.scandir(pkg) as entries:
            stats = [(e.name, e.stat()) for e in entries]
    except OSError:
        return None
    return tuple(sorted((n, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for n, st in stats))


def audited_package(path: str | Path) -> AuditedPackage:
    """The package at ``path`` through every check of ``rts package verify`` that needs no forward pass
    (:func:`run_audit`: files, ``SHA256SUMS``, the zip CRC-32 of every ``weights.pth`` member, its pickle's
    globals, every YAML file without duplicate keys, calibrated deployment numerics, the raster contract, the
    channel binding, run metadata, requirements); a max-F1 fallback threshold passes here (the caller warns).

    Memoised per process: the audit runs again only when an entry of the package directory changed (size, mtime,
    ctime or inode), so loading a package many times (a campaign's chunks) reads its files once.

    Raises:
        PackageError: one line naming the package and each failed check with its detail (which names the file).
    """
    pkg = Path(path)
    key = os.path.realpath(pkg)
    sig = _signature(pkg)
    with _audits_lock:
        hit = _audits.get(key)
    if sig is not None and hit is not None and hit[0] == sig:
        audit = hit[1]
    else:
        audit = run_audit(pkg, allow_fallback_threshold=True)
        if sig is not None and _signature(pkg) == sig:  # unchanged while it was audited: valid until a change
            with _audits_lock:
                _audits[key] = (sig, audit)
    failed = [c for c in audit.checks if not c.ok]
    if failed:
        what = "; ".join(f"{c.name} check: {c.detail}" for c in failed)
        raise PackageError(" ".join(f"package {pkg} fails `rts package verify` ({what})".split()))
    assert audit.deployment is not None and audit.model_config is not None and audit.stats is not None  # all ok
    return AuditedPackage(pkg, audit.deployment, audit.model_config, audit.stats)


def warn_if_fallback_threshold(pkg: AuditedPackage) -> None:
    """Log, on each use of the package, that its threshold is calibration's max-F1 fallback."""
    if pkg.fallback_threshold:
        log.warning(
            "package %s: %s threshold_source %s: the threshold %g is calibration's max-F1 fallback, not one reaching "
            "the target precision on Val-Realistic (expect a lower precision than targeted; `rts package verify` "
            "refuses it without --allow-fallback-threshold)",
            pkg.path,
            DEPLOYMENT,
            pkg.threshold_source,
            pkg.deployment.threshold,
        )


# --------------------------------------------------------------------------- load + one tile
def load_weights(pkg: Path, mc: PackagedModelConfig) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    """The package's declared architecture with ``weights.pth`` loaded (:func:`rtscore.models.load_model`:
    ``weights_only=True``, strict, on the CPU, eval mode), and its state_dict.

    Raises:
        CheckpointError: ``weights.pth`` is missing or does not load with ``weights_only=True``.
        TypeError: The file is not a state_dict; or whatever torch raises for a mismatch.
    """
    model = load_model(pkg / WEIGHTS, mc, "cpu")
    return model, model.state_dict()


def _load_and_run(pkg: Path, device: str) -> list[Check]:
    """Load ``weights.pth`` (weights_only) into the declared model, strictly, and run one seeded random tile."""
    import torch

    mc = read_model_config(pkg / MODEL)
    dep = read_deployment_config(pkg / DEPLOYMENT)
    try:
        model, state = load_weights(pkg, mc)  # on the CPU: a device that cannot run fails `forward` below
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
        precision = inference_precision(dep.precision, dev)
        note = f" ({dep.precision} has no CPU autocast: ran in {precision})" if precision != dep.precision else ""
        shape = (1, mc.in_channels, mc.tile_size, mc.tile_size)
        x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dev)
        model = model.to(dev).eval()
        with torch.inference_mode():
            out = forward_logits(model, x, precision=precision, keep_channels=True, as_float=False)
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


def verify_package(path: str | Path, *, device: str = "cpu", allow_fallback_threshold: bool = False) -> VerifyReport:
    """Audit a package without unpickling anything; if that passes, load the weights and run one tile.

    A max-F1 fallback threshold fails the audit unless ``allow_fallback_threshold``."""
    pkg = Path(path)
    checks = audit_package(pkg, allow_fallback_threshold=allow_fallback_threshold)
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
