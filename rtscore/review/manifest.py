"""A review export's layout and records (docs/review.md, "The export").

``rts review export`` writes, under a review directory (local or ``gs://bucket/prefix``):

```
<review>/
  review.json              ReviewHeader: the campaign and package reviewed, the selection, the chip settings
  manifest.jsonl           one ReviewObject per line, in review order (the order of the page)
  chips/<object_id>.png    the scene's pixels around the object (RGBA, alpha 0 = NoData), no resampling
  chips/<object_id>.svg    the chip with its overlay: the object's outline, probability, scale bar, ground area
  index.html               the review page (docs/review.md, "The review page"); review-data.js its data
  label-studio/            tasks.json and config.xml for teams that review in Label Studio
```

The review id (:func:`review_id`) names one review: the campaign's objects (the sha256 of its objects layer), the
package that mapped them, the selection and the objects chosen. Verdicts carry it (rtscore.review.verdicts), so
ingest can refuse verdicts of another review, and a manifest whose campaign has since been mapped again (object ids
are renumbered then).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError

from rtscore.config.base import StrictModel
from rtscore.errors import PipelineError
from rtscore.identity import digest

SCHEMA_VERSION: Literal[1] = 1
HEADER_FILE = "review.json"
MANIFEST_FILE = "manifest.jsonl"
CHIPS_DIR = "chips"
PAGE_FILE = "index.html"
PAGE_DATA_FILE = "review-data.js"
LABEL_STUDIO_DIR = "label-studio"

SelectionMode = Literal["all", "min-prob", "stratified", "uncertain"]


class ReviewError(PipelineError, ValueError):
    """A review export, verdict file or ingest input is unusable; the message names the file and the object."""


class CampaignRef(StrictModel):
    """The campaign a review was exported from."""

    uri: str = Field(..., description="The campaign's output root (local path or gs://).")
    objects_sha256: str = Field(..., description="sha256 of its objects layer (objects.gpkg) when exported.")
    package_sha256: str = Field(..., description="The deployment package that mapped it (summary.json).")
    crs_wkt: str = Field(..., description="The campaign CRS (the objects layer's), WKT.")


class Selection(StrictModel):
    """Which of the campaign's objects are reviewed (docs/review.md, "Choosing the objects")."""

    mode: SelectionMode = Field("all", description="all, min-prob, stratified or uncertain.")
    min_prob: float | None = Field(None, ge=0, le=1, description="min-prob: least prob_max of an object reviewed.")
    n: int | None = Field(None, ge=1, description="stratified, uncertain: how many objects.")
    seed: int = Field(0, description="stratified: the sample's seed.")
    threshold: float | None = Field(
        None, ge=0, le=1, description="uncertain: the package's decision threshold the objects are closest to."
    )


class ChipSettings(StrictModel):
    """How the window around an object is chosen (scene pixels, never resampled)."""

    context: float = Field(0.5, ge=0, le=4, description="Context on each side, as a fraction of the object's size.")
    min_px: int = Field(64, ge=16, le=4096, description="Least chip side in pixels.")
    max_px: int = Field(1024, ge=16, le=8192, description="Most chip side in pixels (a larger object is centred).")


class TilingRef(StrictModel):
    """The tiling config whose regions and splits the objects were placed in (optional at export)."""

    path: str = Field(..., description="The tiling config file.")
    sha256: str = Field(..., description="Its sha256 when exported.")
    splits: dict[str, list[str]] | None = Field(None, description="Its splits: split -> region names.")


class ReviewHeader(StrictModel):
    """``review.json``."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Format version.")
    review_id: str = Field(..., description="sha256 of the campaign, package, selection and objects (review_id()).")
    campaign: CampaignRef
    selection: Selection
    chips: ChipSettings
    tiling: TilingRef | None = Field(None, description="Regions and splits source (None: not placed).")
    n_objects: int = Field(..., ge=0, description="Objects in manifest.jsonl.")
    code_sha256: str = Field(..., description="The export code's identity (chips are reproducible under it).")


class ReviewObject(StrictModel):
    """One line of ``manifest.jsonl``: an object to review and its chip."""

    object_id: int = Field(..., ge=1, description="The campaign's object id (objects.gpkg).")
    scene_id: str = Field(..., description="The scene the chip is read from.")
    scene_uri: str = Field(..., description="That scene's raster, as the campaign mapped it.")
    region: str | None = Field(
        None, description="The region of the grid cell holding the object's representative point (a point inside it)."
    )
    regions: list[str] | None = Field(
        None, description="Every region of the grid cells the object touches (None: no tiling config, or before)."
    )
    split: str | None = Field(
        None,
        description="The strictest split (test, val, train) of those regions, as ingest places the object (None: no "
        "tiling config or no split).",
    )
    inventory_uids: list[str] | None = Field(
        None,
        description="The ids of the tiling config's inventory polygons the object overlaps (a shared area, not only "
        "a touching border), in inventory order; None: exported without a tiling config, or before this field.",
    )
    prob_mean: float = Field(..., ge=0, le=1)
    prob_max: float = Field(..., ge=0, le=1)
    ground_area_m2: float = Field(..., ge=0)
    size_bin: str | None = None
    partial: bool = False
    geometry: dict[str, Any] = Field(..., description="The object's outline, GeoJSON in EPSG:4326.")
    geometry_wkt: str = Field(..., description="The object's outline in the campaign CRS, WKT (exact).")
    chip: str = Field(..., description="chips/<object_id>.png, relative to the review directory.")
    overlay: str = Field(..., description="chips/<object_id>.svg, relative to the review directory.")
    chip_window: tuple[int, int, int, int] = Field(
        ..., description="col_off, row_off, width, height of the chip in the scene's pixels (may leave the scene)."
    )
    chip_outline: list[list[list[float]]] = Field(
        ..., description="The outline in chip pixel coordinates (x right, y down): one ring per exterior ring."
    )
    pixel_ground_m: float = Field(..., gt=0, description="Ground metres of one chip pixel at the object.")
    chip_sha256: str = Field(..., description="sha256 of the chip PNG.")


def object_facts(obj: ReviewObject) -> dict[str, Any]:
    """What a reviewer is shown of an object beside its chip (the page's facts panel, a Label Studio task's data)."""
    return obj.model_dump(
        mode="json",
        include={
            "object_id", "scene_id", "region", "regions", "split", "inventory_uids", "prob_mean", "prob_max",
            "ground_area_m2", "size_bin", "partial", "pixel_ground_m",
        },
    )  # fmt: skip


def review_id(campaign: CampaignRef, selection: Selection, object_ids: Sequence[int]) -> str:
    """The id of one review: what was reviewed (the campaign's objects and package), how they were chosen and which."""
    doc = {
        "objects_sha256": campaign.objects_sha256,
        "package_sha256": campaign.package_sha256,
        "selection": selection.model_dump(mode="json"),
        "object_ids": list(object_ids),
    }
    return digest(doc)


def read_header(path: Path) -> ReviewHeader:
    """``review.json`` (a local file).

    Raises:
        ReviewError: missing, not JSON, or not a review header (the file and the field named).
    """
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ReviewError(f"{path}: no review header; is this a directory written by `rts review export`?") from None
    except (OSError, ValueError) as err:
        raise ReviewError(f"{path}: not readable as JSON ({err})") from None
    try:
        return ReviewHeader.model_validate(data)
    except ValidationError as err:
        raise ReviewError(f"{path}: not a review header: {_first_error(err)}") from None


def iter_objects(path: Path) -> Iterator[ReviewObject]:
    """The objects of ``manifest.jsonl`` one at a time (bounded memory).

    Raises:
        ReviewError: a line that is not a review object (the file and line number named).
    """
    try:
        f = path.open()
    except FileNotFoundError:
        raise ReviewError(f"{path}: no review manifest; is this a directory written by `rts review export`?") from None
    with f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield ReviewObject.model_validate_json(line)
            except ValidationError as err:
                raise ReviewError(f"{path}: line {n}: not a review object: {_first_error(err)}") from None


def object_line(obj: ReviewObject) -> str:
    """One manifest line (no trailing newline), with a stable key order."""
    return json.dumps(obj.model_dump(mode="json"), separators=(",", ":"))


def _first_error(err: ValidationError) -> str:
    e = err.errors()[0]
    where = ".".join(str(p) for p in e["loc"]) or "(top level)"
    return f"{where}: {e['msg']}" + (f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else "")
