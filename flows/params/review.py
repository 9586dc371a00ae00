"""The review flows' parameters: review-export (a campaign's objects -> a review directory) and review-ingest
(verdicts -> the next dataset version)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from flows.fields import Cli, data_root_location, local_file, local_output, run_location
from flows.form import FormModel


class ReviewExportParams(FormModel):
    """review-export: a campaign's objects chosen for review, each as a chip of the scene around it (read as
    inference reads it) with its outline, probability, scale bar and ground area, a review manifest, the review
    page (index.html: opens from the file system or a bucket) and Label Studio tasks. Resumes; docs/review.md."""

    campaign: Annotated[str, Cli(parse=data_root_location)] = Field(
        ...,
        description="The campaign's output root (rts map / map-region): objects.gpkg, index.geojson, summary.json; "
        "a local directory or gs://bucket/prefix.",
    )
    package: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The deployment package that mapped the campaign (checked against its summary.json): its raster "
        "contract reads the chips as inference read the scenes.",
    )
    output: Annotated[str, Cli(parse=run_location)] = Field(
        ..., description="Review directory: a local directory or gs://bucket/prefix (the page opens from either)."
    )
    select: Literal["all", "min-prob", "stratified", "uncertain"] = Field(
        "all",
        description="Which objects: all; min-prob (prob_max at least --min-prob); stratified (--n objects spread "
        "over probability bin x size bin x region, seeded); uncertain (the --n objects whose mean probability is "
        "closest to the package's threshold).",
    )
    min_prob: float | None = Field(None, ge=0, le=1, description="select min-prob: least prob_max reviewed.")
    n: int | None = Field(None, ge=1, description="select stratified or uncertain: how many objects.")
    seed: int = Field(0, description="select stratified: the sample's seed (same seed, same objects).")
    tiling_config: Annotated[str | None, Cli(parse=local_file)] = Field(
        None,
        description="The tiling config the training data was cut with: each object's region and split (its grid "
        "cell's, by the config's regions and splits), a stratum of the stratified sample. Empty: no regions.",
    )
    context: float = Field(0.5, ge=0, le=4, description="Context around an object, a fraction of its size per side.")
    min_chip_px: int = Field(64, ge=16, le=4096, description="Least chip side (scene pixels, never resampled).")
    max_chip_px: int = Field(1024, ge=16, le=8192, description="Most chip side; a larger object is centred.")
    label_studio_image_root: str | None = Field(
        None,
        description="URL prefix of the chips in Label Studio tasks (e.g. gs://bucket/review/ with cloud storage). "
        "Empty: Label Studio's local-files form /data/local-files/?d=<review dir name>/.",
    )
    overwrite: bool = Field(
        False, description="Replace a review directory that holds another review (different selection or campaign)."
    )

    @model_validator(mode="after")
    def _selection_values(self) -> ReviewExportParams:
        if self.select == "min-prob" and self.min_prob is None:
            raise ValueError("select min-prob needs min_prob (--min-prob)")
        if self.select in ("stratified", "uncertain") and self.n is None:
            raise ValueError(f"select {self.select} needs n (--n)")
        return self


class ReviewIngestParams(FormModel):
    """review-ingest: reviewers' verdicts into the next dataset version: confirmed RTS join the polygon inventory,
    false positives become hard-negative tiles cut by rts tile from the same scenes, unsure ones are left out;
    regions keep their split (val/test never feed train). Everything is checked before anything is written;
    docs/review.md."""

    review: Annotated[str, Cli(parse=data_root_location)] = Field(
        ..., description="The review directory rts review export wrote (review.json, manifest.jsonl)."
    )
    verdicts: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The verdict file: the GeoJSON the review page exports, or a Label Studio JSON export of the "
        "review's tasks.",
    )
    tiling_config: Annotated[str, Cli(parse=local_file)] = Field(
        ...,
        description="The tiling config of the current dataset (rts tile): its scenes, inventory, regions and splits "
        "are the parent of the next round's.",
    )
    output: Annotated[str, Cli(parse=local_output)] = Field(
        ..., description="The next round's data root (the tile layout, cut by rts tile; review/ records how)."
    )
    held_out: Literal["refuse", "skip", "add"] = Field(
        "refuse",
        description="Judged objects in a val or test region: refuse (nothing written, the objects named), skip (left "
        "out, recorded) or add (to their own split: the val/test set changes between rounds). Never train.",
    )
    new_regions: Literal["refuse", "train"] = Field(
        "refuse", description="Judged objects in a region of no split: refuse, or add that region to train."
    )
    campaign: Annotated[str | None, Cli(parse=data_root_location)] = Field(
        None, description="The campaign's output root when it moved since the export (default: the one recorded)."
    )
    version: str | None = Field(None, description="The new dataset version's name (default: the parent's + r<N>).")
    pipeline_config: Annotated[str | None, Cli(parse=local_file)] = Field(
        None,
        description="A pipeline config to retarget: written as <output>/review/pipeline.yaml with every GeoTIFF "
        "data_root pointing at --output, for `rts run` of the next round.",
    )
    min_distance_m: float = Field(
        0.0,
        ge=0,
        description="Ground metres every new train tile keeps from the val/test tiles (and every new val/test tile "
        "from train): the pipeline's splits.min_distance_m. 0: they may touch, never overlap. No new tile overlaps a "
        "tile of another split in any case, val and test included.",
    )
