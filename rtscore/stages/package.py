"""Stage package: the deployment package of the seed calibration decided to ship."""

from __future__ import annotations

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.store.format import read_store_attrs
from rtscore.package import PackageError, build_package
from rtscore.stages.calibrate import read_calibration_summary
from rtscore.stages.seeds import check_seed_model
from rtscore.stages.spec import TRAINING_CONFIG, ArtifactRef, StageSpec, record, require_inputs
from rtscore.storage import RunDir, RunLayout
from rtscore.train.result import read_seed_summary


def package(run_dir: str, cfg: PipelineConfig, seeds: list[int] | None = None) -> ArtifactRef:
    """``package/``: weights, stats, model/deployment config, run metadata, frozen requirements, SHA256SUMS.

    ``model_config.yaml`` records the train store's raster contract (the store is an input: a gs:// run stages
    it).

    The shipped seed is the one the calibrate stage decided (``calibration/summary.json``); ``seeds`` are
    the seeds that were calibrated together, and must contain it.
    """
    run = RunDir(run_dir)
    summary = read_calibration_summary(run)
    shipped = summary.shipped_seed
    calibrated = sorted(p.seed for p in summary.seeds)
    if seeds is not None and sorted(seeds) != calibrated:
        raise PackageError(
            f"{run.at(RunLayout.CALIBRATION_SUMMARY)}: the last calibration covered seeds {calibrated}, not "
            f"{sorted(seeds)}; run calibrate with --seeds {' '.join(map(str, sorted(seeds)))} first"
        )
    require_inputs(SPEC, run, seed=shipped)
    check_seed_model(run, cfg, shipped)  # model_config.yaml is written from cfg: it must describe the weights
    # what the model was trained on (band sources, dtypes, CRS, pixel size): predict and drift check inputs with it
    contract = read_store_attrs(run.at(RunLayout.DATASET, split="train")).contract()
    rel = RunLayout.PACKAGE.at()
    run.forget(rel)
    build_package(
        run.path(rel),
        cfg,
        seed=read_seed_summary(run.at(RunLayout.SEED_SUMMARY, seed=shipped)),
        weights=run.at(RunLayout.BEST_WEIGHTS, seed=shipped),
        deployment=run.at(RunLayout.SEED_DEPLOYMENT_CONFIG, seed=shipped),
        stats=run.at(RunLayout.NORMALIZATION_STATS),
        contract=contract,
    )
    return record(SPEC, run, rel, cfg)


SPEC = StageSpec(
    name="package",
    fn=package,
    inputs=(
        RunLayout.DATASET.bind(split="train"),
        RunLayout.CALIBRATION_SUMMARY,
        RunLayout.NORMALIZATION_STATS,
        RunLayout.BEST_WEIGHTS,
        RunLayout.SEED_SUMMARY,
        RunLayout.SEED_DEPLOYMENT_CONFIG,
    ),
    outputs=(RunLayout.PACKAGE,),
    config=(*TRAINING_CONFIG, "deployment", "calibration", "package"),
    params=("seeds",),
    description="Assemble and audit the deployment package of the shipped seed.",
)
