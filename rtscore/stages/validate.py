"""Stage validate-data: every split through its DataLoader; report, sample grid, refusal on a failed check."""

from __future__ import annotations

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.errors import DataValidationError
from rtscore.data.validation.run import validate_data as run_checks
from rtscore.stages.spec import DATA_CONFIG, ArtifactRef, StageSpec, record, require_inputs
from rtscore.storage import RunDir, RunLayout, staged_dir

SPLITS = ("train", "val", "test")


def validate_data(
    run_dir: str, cfg: PipelineConfig, *, max_batches: int | None = None, num_workers: int = 0, progress: bool = False
) -> ArtifactRef:
    """``validation/``: report.json, report.md, samples.png; raises if a check fails (report still written)."""
    run = RunDir(run_dir)
    require_inputs(SPEC, run)
    stores = {
        s: run.at(RunLayout.DATASET, split=s) for s in SPLITS if run.fetch(RunLayout.DATASET.at(split=s)) is not None
    }
    rel = RunLayout.VALIDATION.at()
    run.forget(rel)
    failure: DataValidationError | None = None
    with staged_dir(run.path(rel)) as tmp:
        try:
            run_checks(
                cfg,
                stores,
                run.at(RunLayout.NORMALIZATION_STATS),
                tmp,
                max_batches=max_batches,
                num_workers=num_workers,
                progress=progress,
                run_dir=run.root,
            )
        except DataValidationError as err:
            failure = err
    if failure is not None:
        raise DataValidationError(str(failure).replace(str(tmp), str(run.path(rel))))
    return record(SPEC, run, rel, cfg)


SPEC = StageSpec(
    name="validate-data",
    fn=validate_data,
    inputs=(RunLayout.NORMALIZATION_STATS,),
    optional_inputs=(*(RunLayout.DATASET.bind(split=s) for s in SPLITS), RunLayout.DERIVED_SPLITS_SUMMARY),
    outputs=(RunLayout.VALIDATION,),
    # The training loader it checks reads these too (boundary ignore, the sampler's seed, batches and epochs).
    config=(
        *DATA_CONFIG,
        "loss.boundary_handling",
        "loss.boundary_ignore_width",
        "training.seed",
        "training.batch_size",
        "training.steps_per_epoch",
    ),
    description="Check the datasets and the training loader through their DataLoaders and write a report.",
    checks=True,
)
