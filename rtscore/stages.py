"""Pipeline stages over a run directory: each writes its artifacts atomically and records them in the manifest."""

from __future__ import annotations

from collections.abc import Callable

from rtscore.config.base import config_hash, dump_yaml
from rtscore.config.pipeline import PipelineConfig
from rtscore.post_training import (
    CalibrationResult,
    SeedCalibration,
    TestReport,
    _eval_setup,
    calibrate,
    evaluate_test,
    logit_cache,
    package,
)
from rtscore.stage_base import (
    BEST,
    STAGE_CONFIG_EXCLUDES,
    STAGE_MODULES,
    STAGES,
    ArtifactRef,
    TrainResult,
    _ref,
    stage_code_hash,
    stage_config_hash,
)
from rtscore.storage import RunDir, StorageError, staged_dir


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
