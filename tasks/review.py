"""The review tasks: `rts review export` and `rts review ingest` as Prefect tasks, thin calls into `rtscore.review`.

Not cached run-directory stages: the export resumes chip by chip itself (a retry redoes only the chips not yet
written), and ingest checks everything before it writes, then cuts its data root with `rts tile`, which resumes
tile by tile.
"""

from __future__ import annotations

from prefect import task

from rtscore.review import run
from rtscore.review.ingest import IngestResult, ingest_review
from rtscore.review.manifest import ChipSettings, ReviewHeader, Selection


@task(name="review-export", task_run_name="review-export-{output}")
def export(
    campaign: str,
    package: str,
    output: str,
    selection: Selection,
    chips: ChipSettings,
    tiling_config: str | None = None,
    image_root: str | None = None,
    overwrite: bool = False,
) -> ReviewHeader:
    """Chips, manifest, review page and Label Studio tasks of a campaign's selected objects under ``output``."""
    return run.export(
        campaign,
        package,
        output,
        selection,
        chips,
        tiling_config=tiling_config,
        image_root=image_root,
        overwrite=overwrite,
    )


@task(name="review-ingest", task_run_name="review-ingest-{output}")
def ingest(
    review: str,
    verdicts: str,
    tiling_config: str,
    output: str,
    held_out: str = "refuse",
    new_regions: str = "refuse",
    campaign: str | None = None,
    version: str | None = None,
    pipeline_config: str | None = None,
    min_distance_m: float = 0.0,
) -> IngestResult:
    """The verdicts of ``verdicts`` into the data root ``output`` (rtscore.review.ingest)."""
    return ingest_review(
        review,
        verdicts,
        tiling_config,
        output,
        held_out=held_out,  # type: ignore[arg-type]
        new_regions=new_regions,  # type: ignore[arg-type]
        campaign=campaign,
        version=version,
        pipeline_config=pipeline_config,
        min_distance_m=min_distance_m,
    )
