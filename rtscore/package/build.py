"""Building the deployment package from a seed's weights and frozen deployment config."""

from __future__ import annotations

import math
import shutil
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import yaml

from rtscore.config.base import ConfigError, config_hash, load_config
from rtscore.config.binding import RGB_NAMES, RasterContract
from rtscore.config.deployment import DeploymentConfig, require_calibrated
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.identity.commit import code_commit
from rtscore.package.format import (
    DEPLOYMENT,
    METADATA,
    MODEL,
    REQUIREMENTS,
    STATS,
    SUMS,
    WEIGHTS,
    PackagedChannels,
    PackagedModelConfig,
    PackageError,
    PackageFile,
    PackageInfo,
    RunMetadata,
    TrainedWith,
    sums_text,
)
from rtscore.package.verify import audit_package
from rtscore.storage import sha256_file, staged_dir
from rtscore.train.result import SeedSummary


# --------------------------------------------------------------------------- helpers
def _utc(ts: float | None = None) -> str:
    dt = datetime.now(UTC) if ts is None else datetime.fromtimestamp(ts, UTC)
    return dt.isoformat(timespec="seconds").replace("+00:00", "Z")


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
    (directory / SUMS).write_text(sums_text((f.name, f.sha256) for f in files))
    return files


def _model_config(cfg: PipelineConfig, contract: RasterContract) -> PackagedModelConfig:
    return PackagedModelConfig(
        architecture=cfg.model.architecture,
        backbone=cfg.model.backbone,
        decoder_channels=cfg.model.decoder_channels,
        in_channels=cfg.channels.count,
        channels=PackagedChannels(rgb=list(RGB_NAMES), extra=list(cfg.channels.extra)),
        tile_size=cfg.data.tile_size,
        nodata_handling=cfg.data.nodata_handling,
        raster=contract,
        min_object_area_m2=cfg.package.min_object_area_m2,
    )


# --------------------------------------------------------------------------- build
def build_package(
    out: Path,
    cfg: PipelineConfig,
    *,
    seed: SeedSummary,
    weights: Path,
    deployment: Path,
    stats: Path,
    contract: RasterContract,
) -> PackageInfo:
    """Assemble the package directory ``out`` from one seed's weights and frozen deployment config (published
    atomically).

    ``seed`` is the shipped seed's training summary (the calibrate stage decides which seed ships); ``contract``
    the raster contract of the train store (``StoreAttrs.contract``), recorded as ``raster`` in
    ``model_config.yaml`` so that predict and drift check their inputs against what training read. Every
    input is checked before anything is written, and the staged package is audited (as by
    :func:`verify_package`, without the model load) before it replaces a previous one.
    """
    n = seed.seed
    _check_inputs(cfg, n, weights, deployment, stats)
    meta = _run_metadata(cfg, seed, weights)
    final = out
    with staged_dir(final) as tmp:
        files = _write_files(tmp, cfg, contract, meta, weights=weights, deployment=deployment, stats=stats)
        _audit_staged(tmp, cfg, n, weights)
    files.append(PackageFile(name=SUMS, sha256=sha256_file(final / SUMS), bytes=(final / SUMS).stat().st_size))
    return PackageInfo(path=str(final), seed=n, files=files)


def _check_inputs(cfg: PipelineConfig, n: int, weights: Path, deployment: Path, stats: Path) -> None:
    """Refuse, before anything is written, inputs the package could not be right with: missing weights or
    deployment config, an uncalibrated deployment, one at another precision than training (guide §4.6), or
    normalization stats that do not bind the configured channels (guide §4.5).

    Raises:
        PackageError: naming the input and the seed.
    """
    if not weights.is_file():
        raise PackageError(f"weights of seed {n} not found: {weights} (was the seed's training completed?)")
    if not deployment.is_file():
        raise PackageError(f"deployment config of seed {n} not found: {deployment}; run calibrate first")
    try:
        dep = require_calibrated(load_config(DeploymentConfig, deployment), str(deployment))
    except ConfigError as err:
        raise PackageError(str(err)) from None
    if dep.precision != cfg.training.precision:
        raise PackageError(
            f"{deployment}: precision {dep.precision} differs from training.precision {cfg.training.precision} "
            "(guide §4.6: calibration and deployment must run at the training precision)"
        )
    load_normalization_stats(stats, cfg.channels.extra)  # the channel binding by name and band (guide §4.5)


def _run_metadata(cfg: PipelineConfig, seed: SeedSummary, weights: Path) -> RunMetadata:
    """The package's provenance (``run_metadata.json``): code commit (:func:`code_commit`), MLflow run, training
    date (the weights' mtime), the shipped seed's best epoch and metric (None when not finite) and what it was
    trained with."""
    n = seed.seed
    commit = code_commit()
    best = seed.best_val_realistic_pr_auc_geomean_smoothed
    return RunMetadata(
        git_sha=commit.sha,
        git_dirty=commit.dirty,
        git_source=commit.source,
        mlflow_run_id=seed.mlflow_run_id,
        training_date=_utc(weights.stat().st_mtime),
        package_date=_utc(),
        seed=n,
        epoch=int(seed.best_epoch or 0),
        best_metric=best if best is not None and math.isfinite(best) else None,
        trained_with=TrainedWith(precision=cfg.training.precision, seed=n, config_sha=config_hash(cfg)),
    )


def _write_files(
    tmp: Path,
    cfg: PipelineConfig,
    contract: RasterContract,
    meta: RunMetadata,
    *,
    weights: Path,
    deployment: Path,
    stats: Path,
) -> list[PackageFile]:
    """Every file of the package into the staging directory ``tmp``, the checksums last (they cover the others);
    returns the files the checksums list."""
    shutil.copyfile(weights, tmp / WEIGHTS)
    shutil.copyfile(stats, tmp / STATS)
    shutil.copyfile(deployment, tmp / DEPLOYMENT)
    (tmp / MODEL).write_text(yaml.safe_dump(_model_config(cfg, contract).model_dump(mode="json"), sort_keys=False))
    (tmp / METADATA).write_text(meta.model_dump_json(indent=2) + "\n")
    (tmp / REQUIREMENTS).write_text("\n".join(frozen_requirements()) + "\n")
    return write_sha256sums(tmp)


def _audit_staged(tmp: Path, cfg: PipelineConfig, n: int, weights: Path) -> None:
    """Audit the staged package (as :func:`verify_package`, without the model load) so that a package that fails it
    never replaces a previous one; a fallback threshold passes only when the run opted into it.

    Raises:
        PackageError: listing every failed check.
    """
    allow = cfg.calibration.allow_max_f1_fallback  # the run opted into a fallback threshold
    failed = [c for c in audit_package(tmp, allow_fallback_threshold=allow) if not c.ok]
    if failed:
        lines = "\n".join(f"  {c.name}: {c.detail}" for c in failed)
        raise PackageError(f"the package built from seed {n}'s {weights} fails its audit:\n{lines}")
