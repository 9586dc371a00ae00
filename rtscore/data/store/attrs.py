"""What a published tile store says about itself: its attribute document (the zarr attribute ``rtscore``), typed.

The store writer publishes the document as a plain JSON object (:func:`rtscore.data.store.shards.finalize`) and returns
it as a :class:`StoreAttrs`; the reader (:func:`rtscore.data.store.format.read_store_attrs`) gives it back as one
(:meth:`StoreAttrs.as_recorded`). Callers read the counts, the prevalence, the channels, the raster contract and the
band binding as fields or methods, not by string key, so what a store says and what a store written before a field
was recorded is taken to say are decided here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, model_validator

from rtscore.config.binding import InputBinding, RasterContract

# Validation context of a document read back from a published store (StoreAttrs.as_recorded).
AS_RECORDED = "as_recorded"


class StoreCounts(BaseModel):
    """Tiles of a store by kind, from its metadata arrays: positive, negative and full NoData are a partition
    (every tile is of exactly one kind, judged on its stored pixels after every NoData rule)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_tiles: int = Field(..., ge=0, description="Tiles stored (rotations included).")
    n_positive: int = Field(..., ge=0, description="Tiles with at least one valid RTS (label 1) pixel.")
    n_negative: int = Field(..., ge=0, description="Tiles with a valid pixel but no RTS pixel.")
    n_full_nodata: int = Field(..., ge=0, description="Tiles without a valid pixel (never positive).")
    n_regions: int = Field(..., ge=0, description="Distinct regions of the tiles.")
    regions: list[str] = Field(..., description="The regions, sorted.")

    @model_validator(mode="after")
    def _partition(self, info: ValidationInfo) -> StoreCounts:
        if info.context and info.context.get(AS_RECORDED):
            return self  # counts as a store records them: data validation holds them against its tiles
        parts = self.n_positive + self.n_negative + self.n_full_nodata
        if parts != self.n_tiles:
            raise ValueError(
                f"{self.n_positive} positive + {self.n_negative} negative + {self.n_full_nodata} full NoData = "
                f"{parts} tiles, but the store holds {self.n_tiles}: the kinds must be a partition of the tiles"
            )
        return self

    def partition(self) -> str:
        """The counts as the partition they are, for logs: ``88 tiles = 16 positive + 60 negative + 12 full NoData``."""
        return (
            f"{self.n_tiles} tiles = {self.n_positive} positive + {self.n_negative} negative + "
            f"{self.n_full_nodata} full NoData"
        )


class Prevalence(BaseModel):
    """RTS pixels over labelled pixels, per label variant (0 where the variant is not stored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exact: float = Field(..., ge=0, le=1, description="Prevalence of the exact labels.")
    noisy: float = Field(..., ge=0, le=1, description="Prevalence of the noisy labels.")


class StoreAttrs(BaseModel):
    """The attribute document of a published tile store, as the writer records it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: str = Field(..., description="The store format's name (rts-tile-store).")
    format_version: int = Field(..., description="The store layout (1: one array per pixel kind; 2: planes).")
    split: str = Field(..., description="The split the tiles are of.")
    source: str = Field(..., description="What made the tiles: synthetic, geotiff, legacy-npz, ...")
    dataset_version: str = Field(..., description="The dataset version of the generation config.")
    tile_size: int = Field(..., gt=0, description="Tile side in pixels.")
    scale: float = Field(
        1.0,
        gt=0,
        description="Ground-sampling scale (0.5: the 2x field of view of a context); 1 for a store written before "
        "it was recorded.",
    )
    pixel_size_m: float | None = Field(
        None,
        gt=0,
        description="Pixel size in the tiles' CRS units (the writer always records it; None: a store written "
        "before it was recorded, taken to be at the synthetic scenes' nominal 4.77 m).",
    )
    channel_names: list[str] = Field(..., description="The model channels the store holds: R, G, B, then EXTRA.")
    extra_channel_names: list[str] = Field(..., description="The EXTRA channels, in stored order.")
    mask_types: list[str] = Field(..., description="The label variants stored (exact, noisy).")
    versions: dict[str, str] = Field(..., description="Versions of rtscore, zarr and numpy that wrote the store.")
    raster_contract: RasterContract | None = Field(
        None,
        description="The raster contract the tiles were read under (the writer always records it; None: a store "
        "written before it was recorded, see contract()).",
    )
    config: dict[str, Any] = Field(..., description="The source's config document (a generation config's JSON).")
    config_hash: str = Field(..., description="What the store is, as a hash of its config (and its tiles).")
    seed: int | None = Field(None, description="The generator's seed (synthetic stores).")
    shard_tiles: int = Field(..., gt=0, description="Tiles per shard.")
    data_root: str | None = Field(None, description="The GeoTIFF data root ingested (geotiff stores).")
    input_binding: InputBinding | None = Field(None, description="Which raster band feeds each channel (geotiff).")
    context_of: str | None = Field(None, description="The config hash of the 1x store a context store pairs with.")
    counts: StoreCounts = Field(..., description="Tiles by kind.")
    prevalence: Prevalence = Field(..., description="RTS pixels over labelled pixels.")

    @classmethod
    def as_recorded(cls, doc: Mapping[str, Any]) -> StoreAttrs:
        """The document of a published store, typed for reading. Keys this rtscore does not know are left out (an
        attribute a later rtscore added without a new format version, as an added optional array is ignored); the
        fields a store written before they were recorded lacks take their defaults; the counts are taken as
        recorded, a partition or not (the data validation stage holds them against the tiles and names the
        store). A document it cannot type raises pydantic's ValidationError."""
        return cls.model_validate({k: v for k, v in doc.items() if k in cls.model_fields}, context={AS_RECORDED: True})

    def contract(self) -> RasterContract:
        """The raster contract the store records. A store written before it was recorded: synthetic stores are
        EPSG:3857 at their ``pixel_size_m`` (as ``rts synth-geotiff`` writes them), GeoTIFF stores were EPSG:3857
        (ingestion required it) at a pixel size not recorded (not checked)."""
        if self.raster_contract is not None:
            return self.raster_contract
        synthetic = self.source == "synthetic" and self.pixel_size_m is not None
        return RasterContract(crs="EPSG:3857", pixel_size=self.pixel_size_m if synthetic else None)

    def binding(self) -> InputBinding:
        """The binding the store was written with (``input_binding``); positional (EXTRA channel ``i`` from EXTRA
        band ``i``) when it records none: the synthetic scenes' binding, and that of stores written before the
        binding was recorded."""
        if self.input_binding is not None:
            return self.input_binding
        return InputBinding.positional([str(n) for n in self.extra_channel_names])
