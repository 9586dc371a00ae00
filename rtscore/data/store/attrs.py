"""What a published tile store says about itself: its attribute document (the zarr attribute ``rtscore``), typed.

The store writer publishes the document as a plain JSON object (:func:`rtscore.data.store.shards.finalize`) and returns
it as a :class:`StoreAttrs`; callers read the counts, the prevalence and the channels as fields, not by string key.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rtscore.config.binding import InputBinding, RasterContract


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
    def _partition(self) -> StoreCounts:
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
