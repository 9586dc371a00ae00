"""The review flows (docs/review.md): ``review-export`` (a campaign's objects as chips, a review page and Label
Studio tasks) and ``review-ingest`` (verdicts into the next dataset version). Each is one task over
``rtscore.review``; each publishes what it wrote as a markdown artifact."""

from __future__ import annotations

from collections import Counter

from flows.common import flow_run_scope, run_namer
from flows.failures import flow
from flows.params.review import ReviewExportParams, ReviewIngestParams
from flows.ui import artifact_key, create_markdown_artifact
from rtscore.mapping.outputs import CampaignRoot
from rtscore.report import md_table
from rtscore.review.ingest import IngestResult
from rtscore.review.manifest import MANIFEST_FILE, PAGE_FILE, ChipSettings, ReviewHeader, Selection, iter_objects
from rtscore.storage import absolute_location
from tasks import review as t


@flow(name="review-export", flow_run_name=run_namer("review-export", ReviewExportParams, ("output",)))
def review_export(params: ReviewExportParams) -> ReviewHeader:
    """A campaign's selected objects as chips with their outlines, a review manifest, the review page and Label
    Studio tasks under ``output``; a re-run resumes."""
    with flow_run_scope():
        output = absolute_location(params.output)
        header = t.export(
            absolute_location(params.campaign),
            params.package,
            output,
            Selection(mode=params.select, min_prob=params.min_prob, n=params.n, seed=params.seed),
            ChipSettings(context=params.context, min_px=params.min_chip_px, max_px=params.max_chip_px),
            tiling_config=params.tiling_config,
            image_root=params.label_studio_image_root,
            overwrite=params.overwrite,
        )
        root = CampaignRoot(output)
        page = root.uri_of(PAGE_FILE)
        places = Counter((o.region or "-", o.split or "-") for o in iter_objects(root.path(MANIFEST_FILE)))
        table = md_table(["region", "split", "objects"], [(r, s, n) for (r, s), n in sorted(places.items())])
        md = (
            f"# Review {header.review_id[:12]}\n\n{header.n_objects} objects of {header.campaign.uri} "
            f"(selection `{header.selection.mode}`) in {output}.\n\nOpen `{page}` in a browser (from the file system "
            "or the bucket; no server needed), judge each chip with the keyboard, export the verdicts, then run "
            "`rts review ingest` (or the review-ingest flow) on the file.\n\n" + "\n".join(table) + "\n"
        )
        create_markdown_artifact(key=artifact_key("review-export"), markdown=md, description="Review export")
        return header


@flow(name="review-ingest", flow_run_name=run_namer("review-ingest", ReviewIngestParams, ("output",)))
def review_ingest(params: ReviewIngestParams) -> IngestResult:
    """Verdicts into the next dataset version under ``output``: inventory, hard negatives, lineage; checked first."""
    with flow_run_scope():
        result = t.ingest(
            absolute_location(params.review),
            params.verdicts,
            params.tiling_config,
            absolute_location(params.output),
            held_out=params.held_out,
            new_regions=params.new_regions,
            campaign=absolute_location(params.campaign) if params.campaign else None,
            version=params.version,
            pipeline_config=params.pipeline_config,
            min_distance_m=params.min_distance_m,
        )
        create_markdown_artifact(
            key=artifact_key("review-ingest"), markdown=result.render_markdown(), description="Review ingest"
        )
        return result


__all__ = ["review_export", "review_ingest"]
