"""What a published tile store says about itself: its attribute document (the zarr attribute ``rtscore``), typed.

The store writer publishes the document as a plain JSON object (:func:`rtscore.data.shards.finalize`) and returns
it as a :class:`StoreAttrs`; callers read the counts, the prevalence and the channels as fields, not by string key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rtscore.config.binding import InputBinding, RasterContract


class StoreCounts(BaseModel):
    """Tiles of a store by kind, from its metadata arrays."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_tiles: int = Field(..., ge=0, description="Tiles stored (rotations included).")
    n_positive: int = Field(..., ge=0, description="Tiles with at least one RTS pixel.")
    n_negative: int = Field(..., ge=0, description="Tiles without an RTS pixel (full-NoData tiles aside).")
    n_full_nodata: int = Field(..., ge=0, description="Tiles without a valid pixel.")
    n_regions: int = Field(..., ge=0, description="Distinct regions of the tiles.")
    regions: list[str] = Field(..., description="The regions, sorted.")


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
    scale: float = Field(..., gt=0, description="Ground-sampling scale (0.5: the 2x field of view of a context).")
    pixel_size_m: float = Field(..., gt=0, description="Pixel size in the tiles' CRS units.")
    channel_names: list[str] = Field(..., description="The model channels the store holds: R, G, B, then EXTRA.")
    extra_channel_names: list[str] = Field(..., description="The EXTRA channels, in stored order.")
    mask_types: list[str] = Field(..., description="The label variants stored (exact, noisy).")
    versions: dict[str, str] = Field(..., description="Versions of rtscore, zarr and numpy that wrote the store.")
    raster_contract: RasterContract = Field(..., description="The raster contract the tiles were read under.")
    config: dict[str, Any] = Field(..., description="The source's config document (a generation config's JSON).")
    config_hash: str = Field(..., description="What the store is, as a hash of its config (and its tiles).")
    seed: int | None = Field(None, description="The generator's seed (synthetic stores).")
    shard_tiles: int = Field(..., gt=0, description="Tiles per shard.")
    data_root: str | None = Field(None, description="The GeoTIFF data root ingested (geotiff stores).")
    input_binding: InputBinding | None = Field(None, description="Which raster band feeds each channel (geotiff).")
    context_of: str | None = Field(None, description="The config hash of the 1x store a context store pairs with.")
    counts: StoreCounts = Field(..., description="Tiles by kind.")
    prevalence: Prevalence = Field(..., description="RTS pixels over labelled pixels.")
