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
import re
import shutil
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import yaml

from rtscore.config.base import config_hash, load_config
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import RGB_NAMES, PipelineConfig
from rtscore.package_format import (
    DEPLOYMENT,
    METADATA,
    MODEL,
    PACKAGE_FILES,
    REQUIREMENTS,
    STATS,
    SUMS,
    WEIGHTS,
    Check,
    PackagedChannels,
    PackagedModelConfig,
    PackageError,
    PackageFile,
    PackageInfo,
    RunMetadata,
    TrainedWith,
    VerifyReport,
)
from rtscore.package_verify import (
    audit_package,
    audit_weights,
    load_weights,
    pickle_globals,
    render_verify_report,
    verify_package,
)
from rtscore.storage import RunDir, sha256_file, staged_dir
from rtscore.train.result import SeedResult


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


__all__ = [
    "PACKAGE_FILES",
    "Check",
    "PackageError",
    "PackageFile",
    "PackageInfo",
    "PackagedModelConfig",
    "RunMetadata",
    "VerifyReport",
    "audit_package",
    "audit_weights",
    "build_package",
    "choose_seed",
    "frozen_requirements",
    "load_seed_results",
    "load_weights",
    "pickle_globals",
    "render_verify_report",
    "verify_package",
    "write_sha256sums",
]
