"""Pipeline stages over a run directory: each writes its artifacts atomically and records them in the manifest."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, Field

from rtscore.config.base import config_hash, dump_yaml
from rtscore.config.pipeline import PipelineConfig
from rtscore.storage import RunDir, StorageError, staged_dir
from rtscore.train.result import SeedResult

BEST = "best_deployment.pth"  # training's inference checkpoint (guide §4.3); rtscore.train.checkpoint.BEST

# Modules whose code decides each stage's output (part of the cache key of the orchestration layer).
STAGE_MODULES: dict[str, tuple[str, ...]] = {
    "generate-dataset": (
        "data/synthetic",
        "data/store.py",
        "data/generate.py",
        "data/tiles.py",
        "data/geotiff.py",
    ),
    "normalization-stats": ("data/normalization.py", "data/store.py"),
    "train-seed": (
        "train/loop.py",
        "train/data.py",
        "train/validate.py",
        "train/ema.py",
        "train/schedule.py",
        "train/early_stopping.py",
        "data/sampler.py",
        "data/transforms.py",
        "models.py",
        "losses/_functional.py",
        "metrics/prauc.py",
    ),
    "logit-cache": (
        "post_training.py",
        "calibrate/cache.py",
        "calibrate/infer.py",
        "metrics/histograms.py",
        "data/dataset.py",
        "data/transforms.py",
        "models.py",
    ),
    "calibrate": (
        "post_training.py",
        "calibrate/run.py",
        "calibrate/decisions.py",
        "calibrate/temperature.py",
        "calibrate/cache.py",
        "calibrate/plots.py",
        "metrics/prauc.py",
    ),
    "evaluate-test": (
        "post_training.py",
        "evaluate.py",
        "calibrate/infer.py",
        "metrics/objects.py",
        "metrics/prauc.py",
        "models.py",
    ),
    "package": ("post_training.py", "package.py"),
    "validate-data": (
        "data/validation.py",
        "data/dataset.py",
        "data/transforms.py",
        "data/sample_grid.py",
        "data/normalization.py",
        "data/store.py",
    ),
}


# Config sections a stage's output does not depend on: left out of its cache key, so that changing, say, the
# target precision re-runs calibration and what follows, never training or the data stages.
_LATER = ("calibration", "evaluation", "package")
_TRAINING = ("training", "optimizer", "lr_schedule", "ema", "model", "loss", "metrics")
STAGE_CONFIG_EXCLUDES: dict[str, tuple[str, ...]] = {
    "generate-dataset": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "normalization-stats": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "validate-data": ("mlflow", "deployment", *_LATER, *_TRAINING),
    "train-seed": ("mlflow", "deployment", *_LATER),
    "logit-cache": (
        "mlflow",
        "evaluation",
        "package",
        # decision settings: the cache serves every value of these
        "calibration.ratio",
        "calibration.target_precision",
        "calibration.tta_gate",
        "calibration.tta_min_pr_auc_gain",
        "calibration.tta_max_precision_drop",
        "calibration.scale_gate",
        "calibration.scale_min_large_pr_auc_gain",
        "calibration.scale_max_fp_rate_increase",
        "calibration.per_region_thresholds",
        "calibration.temperature_bounds",
        "calibration.ece_bins",
        "deployment.threshold",
        "deployment.temperature",
        "deployment.tta",
        "deployment.scales",
        "deployment.fusion",
        "deployment.region_thresholds",
    ),
    "calibrate": ("mlflow", "evaluation", "package"),
    "evaluate-test": ("mlflow", "package"),
    "package": ("mlflow",),
}


# Pipeline stages from first to last (for reports and tests of what a config change re-runs).
STAGES = (
    "generate-dataset",
    "normalization-stats",
    "validate-data",
    "train-seed",
    "logit-cache",
    "calibrate",
    "evaluate-test",
    "package",
)


def stage_config_hash(stage: str, cfg: PipelineConfig) -> str:
    """sha256 of the config `stage` depends on: the whole config minus STAGE_CONFIG_EXCLUDES (sections or
    `section.field` keys)."""
    from rtscore.config.base import canonical_json

    data = cfg.model_dump(mode="json")
    for key in STAGE_CONFIG_EXCLUDES.get(stage, ()):
        section, _, name = key.partition(".")
        if name:
            data.get(section, {}).pop(name, None)
        else:
            data.pop(section, None)
    return hashlib.sha256(canonical_json(data).encode()).hexdigest()


class ArtifactRef(BaseModel):
    """What a stage hands to the next: where its artifact is and its content fingerprint."""

    uri: str = Field(..., description="Local path or URI of the artifact.")
    path: str = Field(..., description="Path relative to the run directory.")
    sha256: str = Field(..., description="Content fingerprint (see storage.fingerprint).")
    bytes: int = Field(..., description="Size in bytes.")
    stage: str = Field(..., description="Producing stage.")


class TrainResult(BaseModel):
    """A trained seed: its summary and the artifacts recorded in the manifest."""

    result: SeedResult = Field(..., description="Best metric, epochs, MLflow run of the seed.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded seed artifacts.")


def stage_code_hash(stage: str) -> str:
    """sha256 of the source files that implement a stage."""
    root = Path(__file__).parent
    h = hashlib.sha256(stage.encode())
    for rel in STAGE_MODULES[stage]:
        path = root / rel
        for f in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            h.update(f.read_bytes())
    return h.hexdigest()


def _ref(run: RunDir, rel: str, stage: str, chash: str) -> ArtifactRef:
    e = run.record(rel, stage, chash)
    uri = e.uri if run.remote else str(run.path(rel))  # a gs:// run hands on gs:// URIs
    return ArtifactRef(uri=uri, path=rel, sha256=e.sha256, bytes=e.bytes, stage=stage)


def save_resolved_config(run_dir: str, cfg: PipelineConfig) -> ArtifactRef:
    """`config.resolved.yaml`: the config every stage of the run used, generation configs inlined."""
    run = RunDir(run_dir)
    dump_yaml(cfg, run.path("config.resolved.yaml"))
    return _ref(run, "config.resolved.yaml", "config", config_hash(cfg))


def generate_dataset(
    run_dir: str, cfg: PipelineConfig, split: str, *, progress: bool = False, restart: bool = False
) -> ArtifactRef:
    """Generate ``datasets/<split>.zarr`` (or adopt the existing store when data.skip_generation)."""
    from rtscore.data.generate import generate_synthetic
    from rtscore.data.store import read_store_attrs

    run = RunDir(run_dir)
    rel = f"datasets/{split}.zarr"
    gen = getattr(cfg.data.generation, split)
    if cfg.data.skip_generation:
        run.fetch(rel)  # a gs:// run stages a recorded store first
        attrs = read_store_attrs(run.path(rel))  # clear error if it does not exist
        return _ref(run, rel, "generate-dataset", str(attrs.get("config_hash", "")))
    if gen is None:
        raise StorageError(f"data.generation.{split} is not set; give a generation config or set data.skip_generation")
    run.forget(rel)
    if gen.source == "geotiff":
        from rtscore.data.geotiff import ingest_geotiffs

        assert gen.geotiff is not None  # the config validator guarantees it
        ingest_geotiffs(gen, gen.geotiff.data_root, run.path(rel), overwrite=True, restart=restart, progress=progress)
    else:
        generate_synthetic(gen, run.path(rel), overwrite=True, restart=restart, progress=progress)
    return _ref(run, rel, "generate-dataset", config_hash(gen))


def normalization_stats(run_dir: str, cfg: PipelineConfig, *, progress: bool = False) -> ArtifactRef:
    """`normalization_stats.json` from the train store only."""
    from rtscore.data.normalization import compute_normalization_stats, write_normalization_stats

    run = RunDir(run_dir)
    run.require("datasets/train.zarr")
    stats = compute_normalization_stats(
        run.dataset("train"),
        extra_channels=[c.name for c in cfg.channels.extra],
        clip_percentiles=cfg.normalization.clip_percentiles,
        max_tiles=cfg.normalization.max_tiles,
        progress=progress,
    )
    rel = "normalization_stats.json"
    run.forget(rel)
    write_normalization_stats(stats, run.path(rel))
    return _ref(run, rel, "normalization-stats", config_hash(cfg))


def validate_data(
    run_dir: str, cfg: PipelineConfig, *, max_batches: int | None = None, num_workers: int = 0, progress: bool = False
) -> ArtifactRef:
    """`validation/`: report.json, report.md, samples.png; raises if a check fails (report still written)."""
    from rtscore.data.validation import DataValidationError
    from rtscore.data.validation import validate_data as run_checks

    run = RunDir(run_dir)
    stores = {s: run.dataset(s) for s in ("train", "val", "test") if run.fetch(f"datasets/{s}.zarr") is not None}
    run.require("normalization_stats.json")
    rel = "validation"
    run.forget(rel)
    failure: DataValidationError | None = None
    with staged_dir(run.path(rel)) as tmp:
        try:
            run_checks(cfg, stores, run.normalization_stats, tmp, max_batches=max_batches, num_workers=num_workers)
        except DataValidationError as err:
            failure = err
    if failure is not None:
        raise DataValidationError(str(failure).replace(str(tmp), str(run.path(rel))))
    return _ref(run, rel, "validate-data", config_hash(cfg))


def train_seed(
    run_dir: str,
    cfg: PipelineConfig,
    seed: int,
    *,
    fresh: bool = False,
    parent_run_id: str | None = None,
    progress: bool = False,
    on_epoch_end: Callable[[int, dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train (or resume) one seed into ``seeds/seed_<seed>/`` and record its artifacts.

    ``on_epoch_end(epoch, metrics)`` is called after every epoch (e.g. to advance a progress display).
    """
    from rtscore.train.loop import train_seed as run_training

    run = RunDir(run_dir)
    for rel in ("datasets/train.zarr", "datasets/val.zarr", "normalization_stats.json"):
        run.require(rel)
    result = run_training(
        cfg, run.root, seed, fresh=fresh, parent_run_id=parent_run_id, progress=progress, on_epoch_end=on_epoch_end
    )
    base = f"seeds/seed_{seed}"
    refs = [
        _ref(run, f"{base}/{name}", "train-seed", config_hash(cfg))
        for name in ("best_deployment.pth", "metrics.jsonl", "run_summary.json", "curves.png")
        if run.path(f"{base}/{name}").exists()
    ]
    return TrainResult(result=result, artifacts=refs)


def start_multiseed(run_dir: str, cfg: PipelineConfig, seeds: list[int]) -> str | None:
    """The parent MLflow run of a multi-seed training (nested seed runs hang under it)."""
    from rtscore.tracking import Tracker

    tracker = Tracker(cfg.mlflow, RunDir(run_dir).root)
    run_id = tracker.start_run(
        "multi-seed", tags={"rts.seeds": ",".join(map(str, seeds)), "rts.config_hash": config_hash(cfg)}
    )
    tracker.log_params(run_id, {"seeds": seeds, "model": cfg.model.backbone, "architecture": cfg.model.architecture})
    return run_id


def finish_multiseed(
    run_dir: str, cfg: PipelineConfig, parent_run_id: str | None, results: list[TrainResult]
) -> ArtifactRef:
    """`seeds/summary.json`: best metric per seed and mean +- std; logged on the parent run."""
    import statistics

    from rtscore.storage import atomic_write_json
    from rtscore.tracking import Tracker

    run = RunDir(run_dir)
    values = [r.result.best_metric for r in results]
    summary = {
        "seeds": [r.result.model_dump() for r in results],
        "best_val_realistic_pr_auc_geomean_mean": statistics.fmean(values) if values else None,
        "best_val_realistic_pr_auc_geomean_std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "parent_mlflow_run_id": parent_run_id,
    }
    atomic_write_json(run.path("seeds/summary.json"), summary)
    tracker = Tracker(cfg.mlflow, run.root)
    tracker.log_metrics(parent_run_id, {k: v for k, v in summary.items() if isinstance(v, float)}, step=0)
    tracker.end_run(parent_run_id)
    return _ref(run, "seeds/summary.json", "multi-seed-train", config_hash(cfg))


# The after-training stages live in their own module; `rtscore.stages` stays the one import for every stage.
from rtscore.post_training import (  # noqa: E402
    CalibrationResult,
    SeedCalibration,
    TestReport,
    _eval_setup,
    calibrate,
    evaluate_test,
    logit_cache,
    package,
)

__all__ = [
    "BEST",
    "STAGES",
    "STAGE_CONFIG_EXCLUDES",
    "STAGE_MODULES",
    "ArtifactRef",
    "CalibrationResult",
    "SeedCalibration",
    "TestReport",
    "TrainResult",
    "_eval_setup",
    "calibrate",
    "evaluate_test",
    "finish_multiseed",
    "generate_dataset",
    "logit_cache",
    "normalization_stats",
    "package",
    "save_resolved_config",
    "stage_code_hash",
    "stage_config_hash",
    "start_multiseed",
    "train_seed",
    "validate_data",
]
