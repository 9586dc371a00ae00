"""The input binding: which raster file and band feeds each model channel (one definition for every reader).

A model channel is bound to one band of one file of a tile (docs/geotiff.md#the-tile-layout): R, G, B are bands 0, 1, 2
of the RGB raster (``PLANET-RGB/<id>.tif``), each EXTRA channel is the band it names (0-based) of the EXTRA raster
(``EXTRA/<id>.tif``). GeoTIFF ingestion, the tile store's attributes, the normalization stats, the deployment
package, ``rts predict`` and ``rts drift`` all read the same :class:`InputBinding`, so a channel name can never
mean one band at training and another at inference. Declared in YAML as ``channels.extra`` of the pipeline config
and ``geotiff.extra_channels`` of a generation config (both lists of :class:`ExtraChannel`); the pipeline config
refuses the two when they bind a name to different bands. Per-band facts beyond the band index (dtype, CRS,
pixel size, colour interpretation) belong on :class:`BoundBand` too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import Field, model_validator

from rtscore.config.base import StrictModel

RGB_NAMES = ("R", "G", "B")
PIXEL_SIZE_M = 4.77  # Web Mercator zoom 15, as the real PLANET-RGB tiles (docs/geotiff.md#the-tile-layout)
SourceFile = Literal["rgb", "extra"]


class ExtraChannel(StrictModel):
    """One auxiliary channel: its name and the band of the EXTRA raster it is read from."""

    name: str = Field(..., min_length=1, description="Channel name; binds normalization stats to this band.")
    band: int = Field(..., ge=0, description="0-based band index in the EXTRA file.")


def check_extra_names(names: Sequence[str]) -> None:
    """EXTRA channel names are unique and never an RGB name (ValueError naming them)."""
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"extra channel names must be unique; repeated: {dupes}")
    clash = sorted(set(names) & set(RGB_NAMES))
    if clash:
        raise ValueError(f"extra channel names may not reuse RGB names {list(RGB_NAMES)}; got {clash}")


def check_extra_channels(extra: Sequence[ExtraChannel]) -> list[ExtraChannel]:
    """The rules of any EXTRA binding list: unique names, no RGB name, one channel per band.

    Raises:
        ValueError: naming the repeated names or bands (pydantic prefixes the key path).
    """
    check_extra_names([c.name for c in extra])
    bands = [c.band for c in extra]
    shared = sorted({b for b in bands if bands.count(b) > 1})
    if shared:
        who = {b: [c.name for c in extra if c.band == b] for b in shared}
        raise ValueError(f"each EXTRA band feeds one channel; bands bound twice: {who}")
    return list(extra)


class BoundBand(StrictModel):
    """One model channel and the band it is read from."""

    name: str = Field(..., min_length=1, description="Channel name (R, G, B, or an EXTRA channel's name).")
    file: SourceFile = Field(..., description="The tile's raster: 'rgb' (PLANET-RGB/) or 'extra' (EXTRA/).")
    band: int = Field(..., ge=0, description="0-based band index in that raster.")


class InputBinding(StrictModel):
    """Model channel ``i`` is ``channels[i]``: R, G, B from the RGB raster, then the EXTRA channels in order."""

    channels: list[BoundBand] = Field(..., description="Every model input channel, in model order.")

    @model_validator(mode="after")
    def _rgb_then_extra(self) -> InputBinding:
        rgb = [(c.name, c.file, c.band) for c in self.channels[:3]]
        if rgb != [(n, "rgb", i) for i, n in enumerate(RGB_NAMES)]:
            raise ValueError(f"the first channels must be R, G, B = bands 0, 1, 2 of the rgb raster; got {rgb}")
        if any(c.file != "extra" for c in self.channels[3:]):
            raise ValueError("channels after R, G, B must come from the extra raster")
        check_extra_channels(self.extra)
        return self

    @classmethod
    def of_extra(cls, extra: Sequence[ExtraChannel]) -> InputBinding:
        """R, G, B, then ``extra`` (name -> EXTRA band) in that order."""
        rgb = [BoundBand(name=n, file="rgb", band=i) for i, n in enumerate(RGB_NAMES)]
        return cls(channels=[*rgb, *(BoundBand(name=c.name, file="extra", band=c.band) for c in extra)])

    @classmethod
    def positional(cls, extra_names: Sequence[str]) -> InputBinding:
        """EXTRA channel ``i`` from EXTRA band ``i``: the synthetic scenes' binding (``rts synth-geotiff`` writes
        them in that order), and that of stores written before the binding was recorded."""
        return cls.of_extra([ExtraChannel(name=n, band=i) for i, n in enumerate(extra_names)])

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.channels]

    @property
    def extra(self) -> list[ExtraChannel]:
        return [ExtraChannel(name=c.name, band=c.band) for c in self.channels[3:]]

    @property
    def extra_names(self) -> list[str]:
        return [c.name for c in self.channels[3:]]

    @property
    def extra_bands(self) -> list[int]:
        """0-based EXTRA band of each EXTRA channel, in model order."""
        return [c.band for c in self.channels[3:]]

    def select(self, names: Sequence[str]) -> InputBinding:
        """The binding of R, G, B and the EXTRA channels ``names`` (in that order); a name not bound is an error."""
        bands = self.bands_by_name()
        missing = [n for n in names if n not in bands]
        if missing:
            raise ValueError(f"extra channels {missing} are bound to no band (bound: {self.extra_names})")
        return InputBinding.of_extra([ExtraChannel(name=n, band=bands[n]) for n in names])

    def bands_by_name(self) -> dict[str, int]:
        """EXTRA channel name -> 0-based EXTRA band."""
        return {c.name: c.band for c in self.channels[3:]}


def binding_conflicts(declared: Sequence[ExtraChannel], bound: Mapping[str, int]) -> list[str]:
    """Each way ``declared`` disagrees with ``bound`` (name -> band): a name bound to no band or to another band."""
    out = []
    for c in declared:
        if c.name not in bound:
            out.append(f"{c.name!r} is bound to no band")
        elif bound[c.name] != c.band:
            out.append(f"{c.name!r} is band {bound[c.name]} there, band {c.band} here")
    return out


# --------------------------------------------------------------------------------------------- the raster contract
# The name stores and packages record. Its "dataset mask" is the mask of R, G, B (an internal mask, or their declared
# nodata), never GDAL's dataset mask of an R,G,B,NIR file (NIR's): the name is kept so recorded contracts still load.
NODATA_RULE: Literal["alpha-or-dataset-mask+extra-nodata"] = "alpha-or-dataset-mask+extra-nodata"


class RasterBandMap(StrictModel):
    """Explicit bands of an RGB raster whose colour interpretation does not say which band is which."""

    rgb: list[int] = Field(..., min_length=3, max_length=3, description="0-based bands of R, G, B, in that order.")
    alpha: int | None = Field(
        None,
        ge=0,
        description="0-based alpha band (0 = NoData); None: no alpha (an internal mask, or nodata on R, G, B).",
    )

    @model_validator(mode="after")
    def _distinct(self) -> RasterBandMap:
        used = [*self.rgb, *([] if self.alpha is None else [self.alpha])]
        if min(self.rgb) < 0 or len(set(used)) != len(used):
            raise ValueError(
                f"rgb and alpha bands must be distinct 0-based indexes; got rgb {self.rgb}, alpha {self.alpha}"
            )
        return self


class RasterContract(StrictModel):
    """What the model was trained on, beyond the channel binding: every raster read for it must match.

    Recorded in a tile store's attributes (``raster_contract``) and in the package's ``model_config.yaml``
    (``raster``); GeoTIFF ingestion, ``predict``, ``drift`` and mapping check each input against it before reading
    pixels (`rtscore.data.raster.bands.open_checked`). ``crs``/``pixel_size`` None: not known (stores and packages
    written before the contract was recorded, synthetic-only data), so not checked.
    """

    rgb_bands: RasterBandMap | None = Field(
        None,
        description="Explicit R, G, B (and alpha) bands; None: by the raster's colour interpretation (red, green, "
        "blue, alpha), or bands 0, 1, 2 of a 3-band raster without one.",
    )
    rgb_dtype: Literal["uint8"] = Field("uint8", description="dtype of the RGB bands (values 0-255).")
    extra_dtype: Literal["float32"] = Field("float32", description="dtype of the EXTRA bands.")
    crs: str | None = Field(None, description="CRS of the training rasters (e.g. EPSG:3857); None: not checked.")
    pixel_size: float | None = Field(
        None, gt=0, description="Pixel size of the training rasters in CRS units; None: not checked."
    )
    pixel_size_tolerance: float = Field(
        0.05, ge=0, le=1, description="Relative difference of pixel size accepted (0.05: 5 %)."
    )
    nodata_rule: Literal["alpha-or-dataset-mask+extra-nodata"] = Field(
        NODATA_RULE,
        description="NoData (rtscore.data.raster.bands.valid_mask): alpha 0 (the band the colour interpretation or "
        "rgb_bands says is alpha), else the raster's internal mask, else its declared nodata on all of R, G, B; a band "
        "not R, G, B or alpha (NIR) never decides. Plus EXTRA pixels equal to the EXTRA raster's declared nodata "
        "(NaN included). Any other non-finite EXTRA value is an error.",
    )
