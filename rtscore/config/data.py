"""The pipeline config's data sections: which datasets a run reads and how (``data``: generation configs per split,
tile size, NoData, the DataLoader), its input channels (``channels``), the spatial blocking of its splits
(``splits``) and its normalization stats (``normalization``). :class:`~rtscore.config.pipeline.PipelineConfig`
holds them; the checks that need other sections too (tile sizes, EXTRA bindings against generation) are its own."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_validator

from rtscore.config.base import StrictModel, format_validation_error, read_yaml
from rtscore.config.binding import RGB_NAMES, ExtraChannel, InputBinding, check_extra_channels
from rtscore.config.generation import GenerationConfig, with_absolute_data_root


class LoaderConfig(StrictModel):
    """DataLoader settings (guide §9.1, Data Loading)."""

    num_workers: int = Field(8, ge=0, le=128, description="DataLoader worker processes (per GPU).")
    pin_memory: bool = Field(True, description="Pin host memory for faster host-to-GPU copies.")
    prefetch_factor: int = Field(2, ge=1, le=64, description="Batches prefetched per worker.")
    persistent_workers: bool = Field(True, description="Keep workers alive across epochs.")
    drop_last: bool = Field(
        True,
        description="Drop the last incomplete training batch: the positives (or, unbalanced, the tiles) of an "
        "epoch that do not fill a whole batch wait for the next epoch. false: they go in one smaller last batch "
        "with negatives in the epoch's proportion. No effect when training.steps_per_epoch is set (every batch "
        "is whole); validation and evaluation never drop tiles.",
    )


class GenerationRefs(StrictModel):
    """Generation config per split: a path (relative to this config file) or an inline mapping."""

    train: GenerationConfig | None = Field(None, description="Generation config of the train split.")
    val: GenerationConfig | None = Field(None, description="Generation config of the validation split.")
    test: GenerationConfig | None = Field(None, description="Generation config of the test split.")

    @field_validator("train", "val", "test", mode="before")
    @classmethod
    def _load_path(cls, v: Any, info: ValidationInfo) -> Any:
        if isinstance(v, str):
            base = Path((info.context or {}).get("base_dir", "."))
            path = (base / v).resolve()
            data = read_yaml(path)
            if not isinstance(data, dict):
                raise ValueError(f"generation config {path} must be a mapping")
            try:
                return with_absolute_data_root(GenerationConfig.model_validate(data), path.parent)
            except ValidationError as err:  # re-raised with the file and the inner key paths named
                raise ValueError(format_validation_error(err, str(path))) from None
        if isinstance(v, dict) and isinstance(v.get("geotiff"), dict):
            base = Path((info.context or {}).get("base_dir", "."))
            return with_absolute_data_root(GenerationConfig.model_validate(v), base)
        return v

    def items(self) -> list[tuple[str, GenerationConfig]]:
        return [(s, g) for s in ("train", "val", "test") if (g := getattr(self, s)) is not None]


class DataConfig(StrictModel):
    """Which datasets the run uses and how they are read."""

    generation: GenerationRefs = Field(default_factory=GenerationRefs, description="Per-split generation configs.")
    tile_size: int = Field(512, ge=32, le=4096, description="Model input size; must match the stores.")
    mask_type: Literal["exact", "noisy"] = Field("exact", description="Which label variant trains the model.")
    nodata_handling: bool = Field(
        True,
        description="Alpha-keyed NoData: alpha-0 pixels get label 255 and the channel's training mean "
        "(never keyed off zero-valued pixels, guide §4.4 caveat).",
    )
    exclude_full_nodata: bool = Field(True, description="Skip tiles that are entirely NoData (guide §4.4).")
    skip_generation: bool = Field(False, description="Use existing stores in the run directory; do not generate.")
    additional_roots: list[str] = Field(
        default_factory=list,
        description="Extra train stores (e.g. a 0.5x context-expanded store) joined to train. They are train data to "
        "spatial blocking: none may hold a region of the val or test store, nor (where the stores record footprints) "
        "a tile overlapping a val or test tile or within splits.min_distance_m of one; validate-data and training "
        "refuse it naming the root and the tiles.",
    )
    loader: LoaderConfig = Field(default_factory=LoaderConfig, description="DataLoader settings.")


class ChannelsConfig(StrictModel):
    """Input channels: RGB always, then the listed EXTRA bands (early fusion)."""

    extra: list[ExtraChannel] = Field(
        default_factory=list,
        description="Auxiliary channels appended after RGB, each bound to a 0-based band of the EXTRA raster; the "
        "one binding the stores, stats, package, predict and drift read (docs/geotiff.md).",
    )

    @field_validator("extra")
    @classmethod
    def _unique(cls, v: list[ExtraChannel]) -> list[ExtraChannel]:
        return check_extra_channels(v)

    @property
    def names(self) -> list[str]:
        return [*RGB_NAMES, *(c.name for c in self.extra)]

    @property
    def binding(self) -> InputBinding:
        """R, G, B and these EXTRA channels bound to their raster bands."""
        return InputBinding.of_extra(self.extra)

    @property
    def count(self) -> int:
        return 3 + len(self.extra)


class SplitsConfig(StrictModel):
    """Spatial blocking: region names per split (whole regions go to one split)."""

    train: list[str] | None = Field(None, description="Regions of the train split (None: take from the data).")
    val: list[str] | None = Field(None, description="Regions of the validation split.")
    test: list[str] | None = Field(None, description="Regions of the test split.")
    min_test_positives: int = Field(
        100,
        ge=0,
        description="Least positive tiles the test split must hold: a split derived for a GeoTIFF root without "
        "splits.yaml must meet it; validate-data warns when a test store holds fewer. The one key of this rule "
        "(generation configs have none).",
    )
    min_val_regions: int = Field(
        2,
        ge=1,
        description="Least regions the validation split must span: a derived split must meet it and "
        "validate-data fails a val store that spans fewer.",
    )
    min_val_positives: int = Field(
        20,
        ge=0,
        description="Least positive tiles the validation split should hold: val PR-AUC drives early stopping and "
        "the choice of the best checkpoint, and on fewer than 20 positive tiles one tile moves tile recall by 5 "
        "points or more and its standard error (~0.1 at recall 0.7) swamps the epoch-to-epoch changes those "
        "decisions compare. A warning, not a failure (a thin val still trains): a derived split prefers one that "
        "meets it and lists it in its warnings; validate-data warns when a val store holds fewer (0: never).",
    )
    min_distance_m: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="Ground metres every tile of train data (the train store and each data.additional_roots store) "
        "must keep from every val and test tile (spatial blocking by geometry, guide §10.1), measured between the "
        "tiles' footprints (GeoTIFF stores record them). 0: footprints may touch (adjacent regions on one grid) but "
        "not overlap. Val and test tiles may touch each other whatever this is, never overlap. validate-data fails a "
        "pair closer than this, naming both tiles; stores without footprints (synthetic) are checked by region and "
        "tile id only.",
    )

    @model_validator(mode="after")
    def _check_disjoint(self) -> SplitsConfig:
        seen: dict[str, str] = {}
        for split in ("train", "val", "test"):
            for region in getattr(self, split) or []:
                if region in seen:
                    raise ValueError(f"region {region!r} is in splits.{seen[region]} and splits.{split}")
                seen[region] = split
        return self


class NormalizationConfig(StrictModel):
    """Per-channel statistics from the train split only (guide §4.1, §4.5)."""

    clip_percentiles: tuple[float, float] | None = Field(
        None, description="Clip values to these percentiles before computing mean/std (null: no clipping)."
    )
    max_tiles: int | None = Field(None, ge=1, description="Use at most this many train tiles (null: all).")

    @field_validator("clip_percentiles")
    @classmethod
    def _pct(cls, v: tuple[float, float] | None) -> tuple[float, float] | None:
        if v is not None and not 0.0 <= v[0] < v[1] <= 100.0:
            raise ValueError(f"expected 0 <= low < high <= 100; got {v}")
        return v
