"""Config of one generated tile store (one split): source, counts, scene content, store layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer, model_validator

from rtscore.config.base import SCHEMA_VERSION, StrictModel, check_tile_size
from rtscore.config.binding import ExtraChannel, InputBinding, RasterBandMap, RasterContract, check_extra_channels

Split = Literal["train", "val", "test"]
SCALES = (1.0, 0.5)  # ground-sampling scales a store may hold (training guide §8.3)
SyntheticExtraChannel = Literal["ndvi", "slope"]
# Keys only the synthetic renderer reads, and why a GeoTIFF source has no use for them.
SYNTHETIC_ONLY = {
    "synthetic": "scene settings of the renderer; the tiles come from the data root",
    "seed": "seeds the renderer; ingestion is deterministic without one",
    "processing.augmentation.rotations": "offline rotation is done for rendered scenes only",
    "store.write_noisy_labels": "the noisy label variant is rendered; ingested stores hold the exact labels",
}


class NoisyLabelConfig(StrictModel):
    """Annotator-like degradation applied to the `noisy` label variant."""

    boundary_jitter_px: float = Field(
        2.0, ge=0.0, le=32.0, description="Typical boundary displacement (pixels) of the noisy outline."
    )
    miss_probability: float = Field(
        0.05, ge=0.0, le=1.0, description="Probability that the annotator missed an RTS entirely (labelled 0)."
    )


class SyntheticConfig(StrictModel):
    """Procedural RTS scene generation (the embedded default data source)."""

    n_positive: int = Field(..., ge=0, description="Tiles containing at least one RTS (before rotation expansion).")
    n_negative: int = Field(..., ge=0, description="Tiles without RTS, many with hard negatives.")
    n_full_nodata: int = Field(
        0, ge=0, description="Extra tiles that are entirely NoData (alpha 0); readers must skip them."
    )
    regions: list[str] = Field(
        ..., min_length=1, description="Region names for this split (spatial blocking: no region in two splits)."
    )
    extra_channels: list[SyntheticExtraChannel] = Field(
        default_factory=list, description="Auxiliary float32 bands rendered with the scene (EXTRA dataset stand-in)."
    )
    rts_diameter_fraction: tuple[float, float] = Field(
        (0.03, 1.3),
        description="Log-uniform range of RTS diameter as a fraction of the tile size (>1 = larger than a tile).",
    )
    max_rts_per_tile: int = Field(3, ge=1, le=20, description="Most RTS placed in one positive tile.")
    hard_negative_probability: float = Field(
        0.7, ge=0.0, le=1.0, description="Probability that a tile contains hard negatives (lakes, rivers, roads ...)."
    )
    cloud_probability: float = Field(0.15, ge=0.0, le=1.0, description="Probability of a cloud and its shadow.")
    partial_nodata_probability: float = Field(
        0.08, ge=0.0, le=1.0, description="Probability that a tile has a partial NoData region (alpha 0)."
    )
    dark_pixel_probability: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="Probability that a tile holds valid pitch-dark pixels (0,0,0 with alpha 255) in shadow or water.",
    )
    noisy_labels: NoisyLabelConfig = Field(
        default_factory=NoisyLabelConfig, description="How the `noisy` label variant is degraded."
    )
    generation_batch_size: int = Field(
        16, ge=1, le=4096, description="Tiles rendered per batch (lower = less RAM during generation)."
    )

    @field_validator("regions")
    @classmethod
    def _unique_regions(cls, v: list[str]) -> list[str]:
        dupes = sorted({r for r in v if v.count(r) > 1})
        if dupes:
            raise ValueError(f"region names must be unique; repeated: {dupes}")
        if any(not r.strip() for r in v):
            raise ValueError("region names must be non-empty")
        return v

    @field_validator("rts_diameter_fraction")
    @classmethod
    def _diameter_range(cls, v: tuple[float, float]) -> tuple[float, float]:
        lo, hi = v
        if not 0 < lo <= hi <= 4.0:
            raise ValueError(f"expected 0 < min <= max <= 4.0; got {v}")
        return v

    @model_validator(mode="after")
    def _check_counts(self) -> SyntheticConfig:
        if self.n_positive + self.n_negative + self.n_full_nodata == 0:
            raise ValueError("n_positive + n_negative + n_full_nodata must be > 0 (the split would be empty)")
        return self


class AugmentationAtGeneration(StrictModel):
    """Offline augmentation applied while generating (the notes' processing.augmentation)."""

    rotations: bool = Field(False, description="Store each tile 4 times, rotated by 0/90/180/270 degrees.")


class ProcessingConfig(StrictModel):
    """Parallelism of generation."""

    num_workers: int = Field(1, ge=1, le=256, description="Worker processes; each owns whole shards.")
    augmentation: AugmentationAtGeneration = Field(
        default_factory=AugmentationAtGeneration, description="Offline augmentation at generation."
    )


class StoreConfig(StrictModel):
    """Zarr layout: one tile per inner chunk, many tiles per shard."""

    shard_tiles: int = Field(32, ge=1, le=4096, description="Tiles per shard (the unit stored as one file/object).")
    compressor: Literal["zstd", "lz4", "none"] = Field("zstd", description="Blosc codec for pixel chunks.")
    clevel: int = Field(3, ge=0, le=9, description="Compression level.")
    write_noisy_labels: bool = Field(True, description="Also store the `noisy` label variant.")


class GeotiffSourceConfig(StrictModel):
    """A GeoTIFF data root in the tile layout of docs/geotiff.md#the-tile-layout (PLANET-RGB/, EXTRA/, labels/, ...)."""

    data_root: str = Field(
        ..., min_length=1, description="The data root: a path, relative to the config file that names it."
    )
    extra_channels: list[ExtraChannel] = Field(
        default_factory=list,
        description="EXTRA channels to store, each {name, band} with band the 0-based band of EXTRA/<id>.tif "
        "(e.g. [{name: ndvi, band: 0}, {name: nbr, band: 1}]); other bands are not read. A pipeline config "
        "refuses a binding that differs from its channels.extra.",
    )
    batch_size: int = Field(16, ge=1, le=4096, description="Tiles read per batch (bounds the reader's memory).")
    rgb_bands: RasterBandMap | None = Field(
        None,
        description="Explicit 0-based R, G, B (and alpha) bands of PLANET-RGB/<id>.tif, e.g. {rgb: [2, 1, 0], "
        "alpha: null} for a B,G,R,NIR file; None: by each file's colour interpretation (a 3-band file without one "
        "is R, G, B). Recorded in the store's raster_contract, so predict reads new scenes the same way.",
    )
    crs: str = Field(
        "EPSG:3857",
        min_length=1,
        description="CRS every tile (RGB, EXTRA, label raster) must be in; a projected CRS (a geographic one, in "
        "degrees, is refused: reproject with rts tile). Polygon labels are reprojected to it.",
    )
    pixel_size: float | None = Field(
        None,
        gt=0,
        description="Pixel size every tile must have, in CRS units; None: the data's own (the median over the "
        "split's tiles), every tile within pixel_size_tolerance of it.",
    )
    pixel_size_tolerance: float = Field(
        0.05, ge=0, le=1, description="Relative pixel-size difference accepted between tiles (0.05: 5 %)."
    )

    def contract(self, pixel_size: float | None = None) -> RasterContract:
        """The raster contract of this source; ``pixel_size`` when the data's own is known (else the config's)."""
        return RasterContract(
            rgb_bands=self.rgb_bands,
            crs=self.crs,
            pixel_size=self.pixel_size if pixel_size is None else pixel_size,
            pixel_size_tolerance=self.pixel_size_tolerance,
        )

    @model_validator(mode="before")
    @classmethod
    def _moved_keys(cls, data: Any) -> Any:
        if isinstance(data, dict) and "min_test_positives" in data:
            raise ValueError(
                "min_test_positives moved to splits.min_test_positives of the pipeline config: one key for the "
                "rule a derived split must meet (with splits.min_val_regions); remove it here"
            )
        return data

    @field_validator("extra_channels", mode="before")
    @classmethod
    def _bound_to_a_band(cls, v: Any) -> Any:
        if isinstance(v, list):
            for i, entry in enumerate(v):
                if isinstance(entry, str):
                    raise ValueError(
                        f"entry [{i}] {entry!r} is bound to no band: write {{name: {entry}, band: <0-based band of "
                        "the EXTRA file>}} (the same binding as channels.extra of the pipeline config)"
                    )
        return v

    @field_validator("extra_channels")
    @classmethod
    def _binding_rules(cls, v: list[ExtraChannel]) -> list[ExtraChannel]:
        return check_extra_channels(v)


class GenerationConfig(StrictModel):
    """One generated split: `rts generate --config <this> --output <split>.zarr`."""

    schema_version: Literal[1] = Field(SCHEMA_VERSION, description="Config schema version.")
    dataset_version: str = Field("1.0", description="Version string recorded in the store and the stats file.")
    source: Literal["synthetic", "geotiff"] = Field(
        "synthetic",
        description="Where tiles come from: rendered synthetic scenes, or a GeoTIFF data root (docs/geotiff.md).",
    )

    split: Split = Field(..., description="The split this store holds.")
    seed: int = Field(42, ge=0, description="Seed: same config + seed gives a byte-identical store.")
    tile_size: int = Field(512, ge=32, le=4096, description="Tile height and width in pixels.")
    scale: float = Field(
        1.0,
        description="Ground-sampling scale of the stored tiles: 1.0 = native 4.77 m pixels; 0.5 = context-expanded "
        "(guide §8.3): each tile is a 2x field of view rendered at 2 x tile_size native pixels, then downsampled 2x "
        "to tile_size (9.54 m pixels). Physical RTS sizes are the same at both scales.",
    )
    synthetic: SyntheticConfig | None = Field(None, description="Synthetic scene settings (source 'synthetic').")
    geotiff: GeotiffSourceConfig | None = Field(None, description="GeoTIFF data root (source 'geotiff').")
    processing: ProcessingConfig = Field(default_factory=ProcessingConfig, description="Parallelism.")
    store: StoreConfig = Field(default_factory=StoreConfig, description="Zarr layout and compression.")

    @field_validator("tile_size")
    @classmethod
    def _multiple_of_32(cls, v: int) -> int:
        return check_tile_size(v)

    @field_validator("scale")
    @classmethod
    def _known_scale(cls, v: float) -> float:
        if v not in SCALES:
            raise ValueError(f"must be one of {list(SCALES)}; got {v}")
        return float(v)

    @model_validator(mode="after")
    def _source_settings(self) -> GenerationConfig:
        if self.source == "synthetic" and self.synthetic is None:
            raise ValueError("source 'synthetic' needs the synthetic section (tile counts, regions, ...)")
        if self.source == "geotiff" and self.geotiff is None:
            raise ValueError("source 'geotiff' needs the geotiff section (data_root, extra_channels)")
        return self

    @model_validator(mode="after")
    def _no_synthetic_keys_for_geotiff(self) -> GenerationConfig:
        """A GeoTIFF source reads none of the synthetic-only keys: giving one is an error, not a silent no-op."""
        if self.source == "geotiff":
            given = [
                key
                for key, is_set in (
                    ("synthetic", self.synthetic is not None),
                    ("seed", "seed" in self.model_fields_set),
                    ("processing.augmentation.rotations", "rotations" in self.processing.augmentation.model_fields_set),
                    ("store.write_noisy_labels", "write_noisy_labels" in self.store.model_fields_set),
                )
                if is_set
            ]
            if given:
                raise ValueError(
                    "source 'geotiff' does not read the synthetic-only keys "
                    + "; ".join(f"{k} ({SYNTHETIC_ONLY[k]})" for k in given)
                    + ": remove them"
                )
        return self

    @model_serializer(mode="wrap")
    def _drop_synthetic_keys_for_geotiff(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A GeoTIFF config is written without the synthetic-only keys, so that it loads back (see above)."""
        data: dict[str, Any] = handler(self)
        if self.source == "geotiff":
            data.pop("seed", None)
            data.pop("synthetic", None)
            if isinstance(data.get("processing"), dict):
                data["processing"] = {k: v for k, v in data["processing"].items() if k != "augmentation"}
            if isinstance(data.get("store"), dict):
                data["store"] = {k: v for k, v in data["store"].items() if k != "write_noisy_labels"}
        return data

    @property
    def synthetic_settings(self) -> SyntheticConfig:
        """The synthetic section, for code that renders scenes (a synthetic source always has one)."""
        if self.synthetic is None:
            raise ValueError("this generation config has no synthetic section (tile counts, regions, ...)")
        return self.synthetic

    @property
    def extra_channels(self) -> list[str]:
        """Names of the stored extra channels, in store order."""
        return self.input_binding.extra_names

    @property
    def input_binding(self) -> InputBinding:
        """Which EXTRA band each stored channel is read from: ``geotiff.extra_channels`` for a GeoTIFF source;
        for synthetic scenes EXTRA band ``i`` is ``synthetic.extra_channels[i]`` (as ``rts synth-geotiff`` writes)."""
        if self.source == "geotiff" and self.geotiff is not None:
            return InputBinding.of_extra(self.geotiff.extra_channels)
        return InputBinding.positional(list(self.synthetic.extra_channels) if self.synthetic is not None else [])

    @property
    def channel_names(self) -> list[str]:
        return ["R", "G", "B", *self.extra_channels]

    @property
    def rotations(self) -> int:
        return 4 if self.processing.augmentation.rotations else 1

    @property
    def n_source_tiles(self) -> int:
        s = self.synthetic
        if s is None:
            raise ValueError("n_source_tiles is known for the synthetic source only")
        return s.n_positive + s.n_negative + s.n_full_nodata

    @property
    def n_tiles(self) -> int:
        return self.n_source_tiles * self.rotations


def with_absolute_data_root(cfg: GenerationConfig, base_dir: str | Path) -> GenerationConfig:
    """``cfg`` with a relative ``geotiff.data_root`` resolved against ``base_dir`` (the naming file's directory)."""
    g = cfg.geotiff
    if g is None or "://" in g.data_root or Path(g.data_root).is_absolute():
        return cfg
    root = str((Path(base_dir) / g.data_root).resolve())
    return cfg.model_copy(update={"geotiff": g.model_copy(update={"data_root": root})})
