"""The review commands' one entry each (`rts review export` / the review-export flow, `rts review ingest` / the
review-ingest flow): the export with its page and Label Studio tasks, ingest as it is."""

from __future__ import annotations

import functools

from rtscore.review.export import export_review
from rtscore.review.label_studio import write_tasks
from rtscore.review.manifest import ChipSettings, ReviewHeader, Selection
from rtscore.review.page import write_page


def export(
    campaign: str,
    package: str,
    output: str,
    selection: Selection,
    chips: ChipSettings,
    *,
    tiling_config: str | None = None,
    image_root: str | None = None,
    overwrite: bool = False,
) -> ReviewHeader:
    """Chips and manifest of the selected objects (rtscore.review.export), then the review page and the Label
    Studio tasks beside them, all published to ``output`` (local or gs://)."""
    extras = (write_page, functools.partial(write_tasks, image_root=image_root))
    return export_review(campaign, package, output, selection, chips, tiling_config, extras=extras, overwrite=overwrite)
