"""Config of `rts tile`: scenes and a polygon inventory in, the tile layout (docs/geotiff.md#the-tile-layout) out."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from rtscore.config.base import SCHEMA_VERSION, StrictModel, check_tile_size, load_config
from rtscore.config.binding import PIXEL_SIZE_M, RasterBandMap, check_extra_names
from rtscore.config.pipeline import SplitsConfig
from rtscore.config.splits import region_splits

DEFAULT_TILE_SIZE = 512  # the tile layout's 512 x 512 tiles (docs/geotiff.md#the-tile-layout)
# The least valid fraction of a tile written. A straight scene edge leaves a tile a strip or a corner of valid
# pixels; the default affine augmentation (scale up to 1.2, shift up to 0.1 of the tile, rotation up to 45 degrees,
# about the centre) can push out a strip along an edge of up to 1/6 of the side (1.2 (0.5 - f) + 0.1 > 0.5 for
# f < 1/6), a corner never more. 0.2 is the least round fraction above it (docs/geotiff.md, "rts tile").
DEFAULT_MIN_VALID_FRACTION = 0.2
Resampling = Literal["bilinear", "cubic", "average", "nearest"]


class BandSource(StrictModel):
    """One band of a raster: of the scene being tiled (``path`` empty) or of a companion raster (a DEM, ...)."""

    path: str | None = Field(
        None,
        description="Companion raster (any CRS; reprojected onto the tile grid), relative to the config file. "
        "Empty: the scene being tiled (each scene's own band).",
    )
    band: int = Field(..., ge=0, description="0-based band index in that raster.")


class ExtraBandConfig(StrictModel):
    """One band of EXTRA/<tile_id>.tif, float32 on the tile grid (band i of the file is entry i of the list)."""

    name: str = Field(..., min_length=1, description="Channel name, written as the band's description.")
    kind: Literal["ndvi", "band"] = Field(
        ...,
        description="ndvi: (nir - red) / (nir + red) of the bands nir and red (NaN where undefined); band: the "
        "band `band` as it is (e.g. a DEM).",
    )
    nir: BandSource | None = Field(None, description="kind ndvi: the near-infrared band.")
    red: BandSource | None = Field(None, description="kind ndvi: the red band (same radiometric scale as nir).")
    band: BandSource | None = Field(None, description="kind band: the band to cut onto the tile grid.")

    @model_validator(mode="after")
    def _sources_of_kind(self) -> ExtraBandConfig:
        given = {k for k in ("nir", "red", "band") if getattr(self, k) is not None}
        wanted = {"ndvi": {"nir", "red"}, "band": {"band"}}[self.kind]
        if given != wanted:
            raise ValueError(
                f"kind {self.kind!r} takes exactly {sorted(wanted)}; got {sorted(given) or 'none'} "
                "(ndvi: {nir: {band}, red: {band}}; band: {band: {path, band}})"
            )
        return self

    @property
    def sources(self) -> list[BandSource]:
        """The bands this channel is computed from, in the order its formula takes them."""
        found = [self.nir, self.red] if self.kind == "ndvi" else [self.band]
        return [s for s in found if s is not None]


InventorySchema = Literal["auto", "arts", "mapped", "plain"]
StaleLabels = Literal["ignore", "refuse"]
# Labels digitised more than two years from their scene are not trusted by default: a headwall retreats metres a
# year (up to tens of metres on an active slump), so two years is a few 4.77 m pixels of boundary already; older,
# the label outlines another slump than the scene shows (docs/inventories.md, "Dates").
DEFAULT_MAX_LABEL_AGE_DAYS = 730


def _texts(v: object) -> object:
    """A list of values as stripped text (a YAML ``1`` for a class value of an integer column is the text ``1``),
    as the file's values are compared; other items are left to the type check."""
    if not isinstance(v, list):
        return v
    out: list[object] = []
    for x in v:
        if isinstance(x, str):
            out.append(x.strip())
        elif isinstance(x, int | float) and not isinstance(x, bool):
            out.append(str(x))
        else:
            out.append(x)
    return out


class ColumnMapping(StrictModel):
    """How an inventory that is not ARTS says each polygon's class, label type and date (schema ``mapped``). Values
    are compared after stripping surrounding blanks, case-sensitively."""

    class_column: str | None = Field(
        None, description="Column holding each polygon's class; empty: every polygon is an RTS (Positive)."
    )
    positive_values: list[str] = Field(
        default_factory=list, description="Values of class_column meaning an RTS (ARTS Positive)."
    )
    negative_values: list[str] = Field(
        default_factory=list,
        description="Values of class_column meaning mapped background (ARTS Negative, a hard negative: label 0).",
    )
    label_type_column: str | None = Field(
        None, description="Column holding each polygon's label type; empty: every polygon is an outline (Polygon)."
    )
    polygon_values: list[str] = Field(
        default_factory=lambda: ["Polygon"], description="Values of label_type_column meaning an outline."
    )
    bbox_values: list[str] = Field(
        default_factory=lambda: ["BoundingBox"],
        description="Values of label_type_column meaning a bounding box (ignore, 255, over its box: never an RTS "
        "mask).",
    )
    date_column: str | None = Field(
        None,
        description="Column holding each label's imagery date (YYYY-MM-DD, or two dates separated by a comma for a "
        "range; a date field too); empty, or a blank value: the label is not age-checked.",
    )

    _as_text = field_validator("positive_values", "negative_values", "polygon_values", "bbox_values", mode="before")(
        _texts
    )

    @model_validator(mode="after")
    def _values(self) -> ColumnMapping:
        for key in ("positive_values", "negative_values", "polygon_values", "bbox_values"):
            if any(not v for v in getattr(self, key)):
                raise ValueError(f"{key}: a blank value; list the values as the column holds them")
        if self.class_column is not None and not self.positive_values:
            raise ValueError("class_column needs positive_values (the values meaning an RTS)")
        if self.class_column is None and self.negative_values:
            raise ValueError("negative_values without class_column: name the column holding them")
        for a, b in (("positive_values", "negative_values"), ("polygon_values", "bbox_values")):
            both = sorted(set(getattr(self, a)) & set(getattr(self, b)))
            if both:
                raise ValueError(f"{both} in both {a} and {b}")
        return self


class PolygonsConfig(StrictModel):
    """The RTS inventory: any vector file OGR reads (GeoPackage, shapefile, GeoJSON, FlatGeobuf), any CRS; ARTS or
    another inventory (docs/inventories.md)."""

    path: str = Field(..., min_length=1, description="Polygon file, relative to the config file.")
    id_column: str | None = Field(
        None,
        description="Column holding each polygon's id (listed in metadata.csv UIDs and NegativeUIDs). Empty: ARTS's "
        "UID when the file has it, else '<file stem>-<feature index>'.",
    )
    schema_: InventorySchema = Field(
        "auto",
        alias="schema",
        description="How classes, label types and dates are read. auto: `columns` when given, else ARTS when the "
        "file carries every required ARTS field (full or abbreviated names), else plain; arts: ARTS (refused "
        "without its fields); mapped: `columns`; plain: every polygon an RTS outline, no dates.",
    )
    columns: ColumnMapping | None = Field(
        None, description="Schema mapped: the class, label-type and date columns of an inventory that is not ARTS."
    )
    max_label_age_days: int = Field(
        DEFAULT_MAX_LABEL_AGE_DAYS,
        ge=0,
        description="Most days between a label's date (range) and its scene's acquisition. 730: a headwall retreats "
        "metres a year, so two years is a few 4.77 m pixels of boundary; beyond, see stale_labels.",
    )
    stale_labels: StaleLabels = Field(
        "ignore",
        description="A label older than max_label_age_days: ignore (its pixels 255, counted in stale_labels) or "
        "refuse (an error before any tile, naming the labels, their dates and their scenes').",
    )

    # `schema` would shadow BaseModel.schema: the field is schema_, read and written as `schema`
    model_config = ConfigDict(**StrictModel.model_config, serialize_by_alias=True)

    @model_validator(mode="after")
    def _columns_with_mapped(self) -> PolygonsConfig:
        if self.columns is not None and self.schema_ in ("arts", "plain"):
            raise ValueError(f"columns is for schema mapped (or auto); schema is {self.schema_}")
        if self.columns is None and self.schema_ == "mapped":
            raise ValueError("schema mapped needs columns (class_column and its values, date_column, ...)")
        return self


class RegionGroups(StrictModel):
    """Regions as groups of polygons whose buffers intersect (ARTS's split rule: no two splits within a buffer)."""

    buffer_m: float | None = Field(
        None,
        gt=0,
        description="Buffer around each polygon, in grid CRS units. Empty: the tile diagonal (tile_size x "
        "pixel_size x sqrt 2), so two polygons in one tile are always in one group.",
    )


class RegionsConfig(StrictModel):
    """Where each tile's RegionName (the unit of spatial blocking) comes from: exactly one of the three."""

    column: str | None = Field(
        None,
        description="A column of the polygon inventory: a tile takes the region of the polygons it holds (the most "
        "common), a tile without polygons that of the nearest polygon.",
    )
    path: str | None = Field(
        None,
        description="A polygon file of regions (relative to the config file): a tile takes the region whose polygon "
        "holds its centre; tiles outside every region are skipped (counted in the manifest); a tile holding RTS "
        "outside every region is an error.",
    )
    name_column: str | None = Field(None, description="With `path`: the column holding each region's name.")
    name: str | None = Field(None, min_length=1, description="One region name for every tile.")
    groups: RegionGroups | None = Field(
        None,
        description="ARTS's buffered-intersection grouping: every polygon (Positive and Negative) buffered, "
        "intersecting buffers joined into one region 'group-<k>'; a tile takes its polygons' group, a tile "
        'without polygons the nearest polygon\'s (docs/inventories.md, "Splits from an inventory").',
    )

    @model_validator(mode="after")
    def _one_source(self) -> RegionsConfig:
        given = [k for k in ("column", "path", "name", "groups") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of column, path, name, groups; got {given or 'none'}")
        if (self.path is None) != (self.name_column is None):
            raise ValueError("path and name_column go together (the region file and the column naming regions)")
        return self


class GridConfig(StrictModel):
    """The tile grid: fixed, anchored at the CRS origin, so tiles cut from different scenes line up."""

    crs: str = Field("EPSG:3857", description="CRS of the tiles (the tile layout's EPSG:3857); must be projected.")
    pixel_size: float = Field(
        PIXEL_SIZE_M, gt=0, description="Pixel size in CRS units (the guide's 4.77 m: Web Mercator zoom 15)."
    )
    tile_size: int = Field(DEFAULT_TILE_SIZE, ge=32, le=4096, description="Tile height and width in pixels.")
    max_resample_factor: float = Field(
        4.0,
        ge=1.0,
        description="Most a scene may be upsampled: its native pixel size (in grid CRS units at the scene centre) "
        "over pixel_size. Beyond 4x each source pixel covers more than 16 tile pixels: the tiles hold interpolated "
        "blocks with none of the texture of the imagery the model learns RTS from, and the run's tiles and time grow "
        "with the square of the factor (a 300 m UTM scene at 65 deg N on the default grid: 710 / 4.77, ~150x)."
        " A scene beyond it is refused before any tile is written, naming both fixes.",
    )

    @field_validator("tile_size")
    @classmethod
    def _multiple_of_32(cls, v: int) -> int:
        return check_tile_size(v)

    @field_validator("crs")
    @classmethod
    def _projected(cls, v: str) -> str:
        from rasterio.crs import CRS
        from rasterio.errors import CRSError

        try:
            crs = CRS.from_user_input(v)
        except CRSError as err:
            raise ValueError(f"not a CRS PROJ knows: {err}") from None
        if not crs.is_projected:
            raise ValueError(f"must be a projected CRS (pixel sizes in metres); got {v}")
        return v


_PIPELINE_SPLITS = SplitsConfig.model_fields  # one source for the rules' defaults: the pipeline config's


class SplitRules(StrictModel):
    """The split rules of the pipeline config (its ``splits`` section) that `rts tile` checks on its plan, before
    any tile is written: the same keys and defaults, so a root that passes here passes ingestion and validate-data."""

    min_val_regions: int = Field(
        _PIPELINE_SPLITS["min_val_regions"].default,
        ge=1,
        description="Least regions with a tile the val split must span (pipeline splits.min_val_regions): with "
        "`splits`, val (when listed) is refused below it; without, the derivation needs it.",
    )
    min_test_positives: int = Field(
        _PIPELINE_SPLITS["min_test_positives"].default,
        ge=0,
        description="Least positive tiles test must hold (pipeline splits.min_test_positives): without `splits` the "
        "derivation needs it (refused early when the plan cannot reach it); with `splits`, a warning.",
    )
    min_val_positives: int = Field(
        _PIPELINE_SPLITS["min_val_positives"].default,
        ge=0,
        description="The thin-val floor (pipeline splits.min_val_positives): val with fewer tiles holding an RTS "
        "whole is a warning, as at validate-data.",
    )


class FocusConfig(StrictModel):
    """Scenes cut only where they touch given areas (``rts review ingest``: the scenes a review added, cut around the
    judged objects, not whole)."""

    path: str = Field(
        ..., min_length=1, description="A vector file of the areas (any CRS OGR reads), relative to the config file."
    )
    scenes: list[str] = Field(
        ...,
        description="Scenes (paths or globs, relative to the config file; each among `scenes`) cut only in the grid "
        "cells touching an area of `path`, and giving pixels to no other cell. The other scenes: every cell, each "
        "cell cut from them alone as without focus (a focus scene never fills their NoData there); in a cell touching "
        "an area, every scene, in `scenes` order. Empty: every scene is cut whole (the areas still mark the cells "
        "where `ignore_column`'s areas are 255).",
    )
    scene_column: str | None = Field(
        None,
        description="A column of `path` naming, per area, the file name of the scene it lies on: a focus scene is then "
        "cut only around the areas naming it (and those with a blank value), so a scene added in a later round never "
        "fills an earlier round's cells. Empty: every area is every focus scene's.",
    )
    ignore_column: str | None = Field(
        None,
        description="A column of `path` marking, with a non-zero value, areas that cut no cell and whose pixels are "
        "255 (ignore) in every tile of a cell touching another area: objects a map found there that no one labelled "
        "(judged unsure, held out, or not judged), so a tile cut for its judged objects does not call them "
        "background. Empty: every area is a judged one.",
    )


class LineageReview(StrictModel):
    """The review a dataset version took its new labels from."""

    review_id: str = Field(..., description="The review's id (review.json).")
    verdicts: str = Field(..., description="The verdict file's name.")
    verdicts_sha256: str = Field(..., description="Its sha256.")


class Lineage(StrictModel):
    """Where a dataset version comes from (``rts review ingest``): recorded in tiling.json, part of the identity."""

    version: str = Field(..., min_length=1, description="This data root's dataset version.")
    parent: str = Field(..., description="The parent data root (relative to the config file; not in the identity).")
    parent_fingerprint: str = Field(..., description="The parent's tiling.json config_fingerprint.")
    review: LineageReview | None = Field(None, description="The review whose verdicts made it.")
    counts: dict[str, int] = Field(default_factory=dict, description="What the review added (confirmed, ...).")


class TilingConfig(StrictModel):
    """`rts tile --config <this>`: scenes or quads (any CRS, any size) and RTS polygons -> PLANET-RGB/, EXTRA/,
    labels/, metadata.csv (and splits.yaml) under ``output``."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Config schema version.")
    scenes: list[str] = Field(
        ...,
        min_length=1,
        description="GeoTIFF scenes or quads, paths or glob patterns relative to the config file. Where scenes "
        "overlap, the first (in this order, globs sorted) with a valid pixel wins.",
    )
    rgb_bands: RasterBandMap | None = Field(
        None,
        description="Explicit R, G, B (and alpha) bands of the scenes; empty: by their colour interpretation "
        "(red, green, blue, alpha), or bands 0, 1, 2 of a 3-band scene (rtscore.data.raster.bands.resolve_bands).",
    )
    polygons: PolygonsConfig = Field(..., description="The RTS polygon inventory.")
    regions: RegionsConfig = Field(..., description="The RegionName of each tile.")
    extra: list[ExtraBandConfig] = Field(
        default_factory=list, description="EXTRA bands, in band order (e.g. ndvi from NIR and red, a DEM)."
    )
    grid: GridConfig = Field(default_factory=GridConfig, description="Tile CRS, pixel size and tile size.")
    resampling: Resampling = Field(
        "bilinear",
        description="Resampling of RGB and EXTRA onto the tile grid (validity is always nearest, labels are "
        "rasterised from the polygons). bilinear: no aliasing at non-integer scale ratios, no overshoot; average "
        "when downsampling more than 2x.",
    )
    splits: dict[str, list[str]] | None = Field(
        None,
        description="Optional splits.yaml to write: split -> region names; every region of a tile must be in "
        "exactly one split. Empty: no splits.yaml (ingestion derives one).",
    )
    min_valid_fraction: float = Field(
        DEFAULT_MIN_VALID_FRACTION,
        ge=0.0,
        lt=1.0,
        description="Least fraction of a tile's pixels that must be valid for it to be written (0: any valid pixel). "
        "Tiles under it (slivers at a scene edge) are not written and are counted (skipped_sparse). 0.2: the "
        "default affine augmentation (scale up to 1.2, shift up to 0.1 of the tile) pushes a strip of up to 1/6 of "
        "the tile out of it, so a sparser tile can reach a batch with no valid pixel left; 0.2 leaves a margin for "
        "shear and elastic. It is 52,429 pixels of a 512 tile, a 102-pixel strip (~170 m of ground at 70 deg N on "
        "the default grid), and costs a scene about 0.2^2 = 4 % of its edge tiles' valid area.",
    )
    split_rules: SplitRules = Field(
        default_factory=SplitRules,
        description="The split rules checked on the plan before any tile is written (the pipeline config's "
        "splits.min_val_regions and splits.min_test_positives; keep them equal).",
    )
    output: str | None = Field(None, description="Data root to write, relative to the config file (or --output).")
    focus: FocusConfig | None = Field(
        None, description="Scenes cut only around given areas (empty: every cell of every scene in a region)."
    )
    lineage: Lineage | None = Field(
        None, description="The dataset version, its parent and the review it adds (written by rts review ingest)."
    )
    scene_dates: dict[str, str] | None = Field(
        None,
        description="Acquisition date (YYYY-MM-DD) per scene file name or glob (matched against the scene's file "
        "name; the first key that matches wins), for the label-age check; a scene no key matches takes its GeoTIFF "
        "date tag (rtscore.data.raster.scene_date). Empty: the tags only.",
    )

    @field_validator("extra")
    @classmethod
    def _unique_names(cls, v: list[ExtraBandConfig]) -> list[ExtraBandConfig]:
        check_extra_names([e.name for e in v])
        return v

    @field_validator("scene_dates", mode="before")
    @classmethod
    def _dates_as_text(cls, v: object) -> object:
        if isinstance(v, dict):  # YAML reads an unquoted 2024-07-01 as a date
            return {k: d.isoformat() if isinstance(d, dt.date) else d for k, d in v.items()}
        return v

    @field_validator("scene_dates")
    @classmethod
    def _iso_dates(cls, v: dict[str, str] | None) -> dict[str, str] | None:
        if v is None:
            return v
        for key, text in v.items():
            try:
                dt.date.fromisoformat(text.strip())
            except ValueError:
                raise ValueError(f"{key!r}: {text!r} is not a date YYYY-MM-DD") from None
        return {k: d.strip() for k, d in v.items()}

    @field_validator("splits")
    @classmethod
    def _regions_once(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        if v is None:
            return v
        unknown = sorted(set(v) - {"train", "val", "test"})
        if unknown:
            raise ValueError(f"splits are train, val, test; got {unknown}")
        region_splits(v)  # SplitError is a ValueError: pydantic names the key
        return v


def resolve_paths(cfg: TilingConfig, base_dir: str | Path) -> TilingConfig:
    """``cfg`` with every relative path (scenes, polygons, regions, companion rasters, output, focus, the lineage's
    parent) resolved against ``base_dir`` (the config file's directory, a real path: no link in it); scene globs are
    kept as patterns. A path's leading ``..`` are taken off ``base_dir`` (its parent is where they lead), so a
    relative path out of the config's directory (a review round's ``../../scenes/a.tif``) resolves to a plain one."""
    base = Path(base_dir)

    def at(p: str) -> str:
        if Path(p).is_absolute():
            return p
        where, parts = base, Path(p).parts
        while parts and parts[0] == "..":
            where, parts = where.parent, parts[1:]
        return str(where.joinpath(*parts))

    return _map_paths(cfg, at)


def relative_paths(cfg: TilingConfig, base_dir: str | Path) -> TilingConfig:
    """The inverse of :func:`resolve_paths`: every absolute path of ``cfg`` written relative to ``base_dir`` (the
    directory its config file will be in), so the config and the files it names can move together (a review round's
    ``tile.yaml``); scene globs stay patterns."""
    base = os.path.realpath(base_dir)  # its real place: ".." from there is what the file system follows
    return _map_paths(cfg, lambda p: os.path.relpath(p, base) if Path(p).is_absolute() else p)


def _map_paths(cfg: TilingConfig, at: Callable[[str], str]) -> TilingConfig:
    """``cfg`` with ``at`` applied to every path it holds (the one list of them, for resolving and relativising)."""

    def band(s: BandSource | None) -> BandSource | None:
        return None if s is None or s.path is None else s.model_copy(update={"path": at(s.path)})

    extra = [
        e.model_copy(update={k: band(getattr(e, k)) or getattr(e, k) for k in ("nir", "red", "band")})
        for e in cfg.extra
    ]
    regions = cfg.regions.model_copy(update={"path": at(cfg.regions.path)}) if cfg.regions.path else cfg.regions
    focus = cfg.focus
    if focus is not None:
        focus = focus.model_copy(update={"path": at(focus.path), "scenes": [at(s) for s in focus.scenes]})
    lineage = cfg.lineage
    if lineage is not None and lineage.parent:
        lineage = lineage.model_copy(update={"parent": at(lineage.parent)})
    return cfg.model_copy(
        update={
            "scenes": [at(s) for s in cfg.scenes],
            "polygons": cfg.polygons.model_copy(update={"path": at(cfg.polygons.path)}),
            "regions": regions,
            "extra": extra,
            "output": at(cfg.output) if cfg.output else None,
            "focus": focus,
            "lineage": lineage,
        }
    )


def load_tiling_config(path: str | Path) -> TilingConfig:
    """A tiling config file, its relative paths resolved against the file's directory (made absolute: the config
    names the same files whatever the working directory and however the config is named)."""
    return resolve_paths(load_config(TilingConfig, path), Path(path).resolve().parent)
