"""The review tasks: `rts review export` and `rts review ingest` as Prefect tasks, the library's own functions.

Not cached run-directory stages: the export resumes chip by chip itself (a retry redoes only the chips not yet
written), and ingest checks everything before it writes, then cuts its data root with `rts tile`, which resumes
tile by tile.
"""

from __future__ import annotations

from prefect import task

from rtscore.review import run
from rtscore.review.ingest import ingest_review

export = task(name="review-export", task_run_name="review-export-{output}")(run.export)
ingest = task(name="review-ingest", task_run_name="review-ingest-{output}")(ingest_review)
