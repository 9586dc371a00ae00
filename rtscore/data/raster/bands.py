"""The one reader of input rasters: GeoTIFF ingestion, ``predict``, ``drift`` and mapping open every RGB (+ EXTRA)
raster pair with :func:`open_checked`, which checks it against the :class:`RasterContract` the model was trained on
before any pixel is read, and then read windows of bound channels and their NoData mask the same way.

Rules (docs/geotiff.md):

* **Bands.** R, G, B and alpha are the bands the raster's colour interpretation names (``red``, ``green``,
  ``blue``, ``alpha``), or the contract's explicit ``rgb_bands``; a raster without colour interpretation is read as
  R, G, B = bands 0, 1, 2 only when it has exactly 3 bands. A 4-band raster with no alpha and no red/green/blue
  interpretation (R,G,B,NIR; Planet's B,G,R,NIR) is refused unless the contract maps its bands. An explicit map
  that contradicts the file's colour interpretation is refused.
* **dtype.** RGB bands must be the contract's dtype (uint8), EXTRA bands float32: no silent rescaling.
* **Georeferencing.** A raster without a CRS is refused; with a contract CRS, another CRS is refused; with a
  contract pixel size, a pixel size (either axis) beyond the relative tolerance is refused; rotated grids are
  refused. The EXTRA raster must lie on the RGB raster's grid (size, CRS, transform to 1e-6 pixel).
* **NoData** (the same at ingestion, ``predict``, ``drift``, mapping and ``rts tile``: :func:`valid_mask`), first
  that applies: the alpha band (tagged or mapped), valid where alpha > 0; else a per-dataset mask (GDAL internal
  mask or ``.msk``); else the declared nodata of the mapped R, G, B bands, a pixel being NoData when all three
  equal it (a 3-band tile with ``nodata=0`` has its all-zero pixels NoData); else every pixel is valid. A band not
  mapped to R, G, B or alpha (NIR) never decides validity, whatever GDAL's dataset mask says. Plus every pixel where
  an EXTRA band equals that raster's declared nodata (NaN included). A non-finite EXTRA value anywhere else is an
  error naming the file and count.
* **Fixes.** Each refusal says how to fix it in the words of where the user is (:class:`RasterFixes`): the flags of
  ``rts predict`` and ``rts drift`` (:data:`PREDICT_FIXES`), ``rts warp`` for ``rts map`` (:data:`MAP_FIXES`), the
  generation config's ``geotiff`` keys or ``rts tile`` at ingestion (:data:`TILE_FIXES`), a tiling config's
  ``rgb_bands`` for ``rts tile`` and ``rts warp``; a command is never offered for a raster it refuses.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from rtscore.config.binding import ExtraChannel, InputBinding, RasterBandMap, RasterContract
from rtscore.errors import PipelineError

if TYPE_CHECKING:
    from rasterio.io import DatasetReader

GRID_TOLERANCE_PX = 1e-6
RGB_DIR, EXTRA_DIR, LABEL_DIR = "PLANET-RGB", "EXTRA", "labels"  # a data root's folders (docs/geotiff.md)
EXTRA_SUFFIX = "_extra"  # the EXTRA raster of a raster outside a data root: <stem>_extra.tif beside it


@dataclass(frozen=True)
class RasterFixes:
    """What a refusal tells the user to do, in the words of where they are: a command's flags on the command line,
    a config's keys where a config is read. Each fix names the command and flag, or the key, that fixes the case, and
    no command is offered for a raster it would refuse (:func:`grid_problems`). ``{path}`` is the raster, ``{crs}``
    its CRS; braces of a literal are doubled (``str.format``).

    Attributes:
        crs_is: how the CRS the contract expects reads (``{crs}``: it), e.g. "trained on EPSG:3857".
        pixel_size_is: how the pixel size the contract expects reads (``{size}``: it).
        crs: the fix of a raster in another projected CRS.
        geographic: the fix of a raster in a geographic CRS (degrees).
        pixel_size: the fix of a raster at another pixel size.
        rotated: the fix of a rotated or sheared grid.
        bands: the fix of bands that cannot be told apart (R, G, B and alpha), after "tag the bands, or ".
        runs_a_command: whether the grid fixes run a command on the raster itself (``rts warp``): such a fix is
            given only for a raster that command takes (a CRS, R, G, B bands that can be told apart, 8-bit).
    """

    crs_is: str
    pixel_size_is: str
    crs: str
    geographic: str
    pixel_size: str
    rotated: str
    bands: str
    runs_a_command: bool


WARP_FIX = (
    "put it on the training grid with rts warp --config <the tiling config the training data was cut with> "
    "--scenes {path} --output <dir> (docs/geotiff.md)"
)
# rts predict and rts drift: scenes to map, on the command line (their --rgb-bands flag)
PREDICT_FIXES = RasterFixes(
    crs_is="trained on {crs}",
    pixel_size_is="the training pixel size {size:.6g}",
    crs=WARP_FIX,
    geographic=WARP_FIX,
    pixel_size=WARP_FIX,
    rotated=WARP_FIX,
    bands="give their order with --rgb-bands R,G,B[,ALPHA] (0-based band indexes: --rgb-bands 2,1,0 for B,G,R,NIR)",
    runs_a_command=True,
)
# rts map (and the review export of its campaign): no band flag; rts warp writes R, G, B, alpha tagged
MAP_FIXES = replace(
    PREDICT_FIXES,
    bands="map them with rgb_bands: {{rgb: [r, g, b], alpha: a|null}} in the tiling config the training data was cut "
    "with and put the scene through rts warp --config <that tiling config> --scenes {path} --output <dir> (rts map "
    "reads the bands rts warp writes: R, G, B, alpha)",
)
_RECUT = "cut the root again from its scenes with rts tile --config <tiling config>"
# GeoTIFF ingestion (rts generate --source geotiff, the generate-dataset stage): a data root's training tiles, read
# under the generation config's geotiff section; rts warp makes scenes to map, never training tiles
TILE_FIXES = RasterFixes(
    crs_is="geotiff.crs is {crs}",
    pixel_size_is="geotiff.pixel_size {size:.6g}",
    crs=f"set geotiff.crs: {{crs}} in the generation config if every tile of the root is in it, else {_RECUT} "
    "(one grid.crs for every tile)",
    geographic=f"tiles need a projected CRS: {_RECUT} (its grid.crs)",
    pixel_size="set geotiff.pixel_size to the tiles' pixel size in the generation config (or leave it empty: the "
    f"split's median) if every tile has it, else {_RECUT} (one grid.pixel_size for every tile)",
    rotated=f"{_RECUT} (a north-up grid)",
    bands="map them with geotiff.rgb_bands: {{rgb: [r, g, b], alpha: a|null}} in the generation config",
    runs_a_command=False,
)
# rts tile and rts warp: the scenes of a tiling config
TILING_BANDS_FIX = "map them with rgb_bands: {{rgb: [r, g, b], alpha: a|null}} in the tiling config"

P = TypeVar("P", bound=PurePath)


def extra_candidates(rgb: P) -> list[P]:
    """Where the EXTRA raster of the RGB raster ``rgb`` may lie, in the order it is looked for: ``EXTRA/<name>`` of
    a data root when ``rgb`` is its ``PLANET-RGB/<name>``, then the sibling ``<stem>_extra<suffix>`` (the last one is
    where a missing EXTRA raster is expected). One rule for local paths and ``gs://`` object names alike."""
    sibling = rgb.with_name(f"{rgb.stem}{EXTRA_SUFFIX}{rgb.suffix}")
    if rgb.parent.name == RGB_DIR:
        return [rgb.parent.parent / EXTRA_DIR / rgb.name, sibling]
    return [sibling]


class RasterContractError(PipelineError, ValueError):
    """An input raster does not match what the model was trained on; the message names the file and the mismatch."""


def unreadable_extra(binding: InputBinding, band_count: int) -> list[ExtraChannel]:
    """The EXTRA channels whose bound band is beyond an EXTRA raster of ``band_count`` bands."""
    return [c for c in binding.extra if c.band >= band_count]


def resolve_bands(
    src: DatasetReader, path: Path | str, declared: RasterBandMap | None, bands_fix: str = TILING_BANDS_FIX
) -> RasterBandMap:
    """The R, G, B and alpha bands of an RGB raster under the contract's rule (module docstring); ``bands_fix``: how
    the user maps them where they are (default: a tiling config's ``rgb_bands``, for rts tile and rts warp).

    Raises:
        RasterContractError: the bands cannot be told apart (:func:`band_problems` says why).
    """
    bands, problems = band_problems(src, path, declared, bands_fix)
    if bands is None:
        raise RasterContractError("; ".join(problems))
    return bands


def band_problems(
    src: DatasetReader, path: Path | str, declared: RasterBandMap | None, bands_fix: str
) -> tuple[RasterBandMap | None, list[str]]:
    """The R, G, B and alpha bands of an RGB raster (None when they cannot be told apart) and why not, with
    ``bands_fix`` (:attr:`RasterFixes.bands`) as the way to map them."""
    interp = [ci.name for ci in src.colorinterp]
    if src.count < 3:
        return None, [
            f"{path}: needs at least 3 bands (R, G, B); this file has {src.count} ({', '.join(interp)}). "
            "The model reads R, G, B from this raster; an index or elevation raster is an EXTRA raster"
        ]
    by_name = {n: [i for i, x in enumerate(interp) if x == n] for n in ("red", "green", "blue", "alpha")}
    if len(by_name["alpha"]) > 1:
        return None, [f"{path}: {len(by_name['alpha'])} bands are marked alpha ({interp}); expected one"]
    alpha = by_name["alpha"][0] if by_name["alpha"] else None
    rgb_names = ("red", "green", "blue")
    tagged_rgb = [by_name[c][0] for c in rgb_names] if all(len(by_name[c]) == 1 for c in rgb_names) else None
    if declared is not None:
        return _declared_bands(src, path, declared, tagged_rgb, alpha)
    if tagged_rgb is not None:
        return RasterBandMap(rgb=tagged_rgb, alpha=alpha), []
    colour = [i for i, x in enumerate(interp) if x != "alpha"]
    if len(colour) == 3 and src.count in (3, 4):
        return RasterBandMap(rgb=colour, alpha=alpha), []
    return None, [
        f"{path}: {src.count} bands with colour interpretation {interp}: no red/green/blue bands "
        f"{'and no alpha band ' if alpha is None else ''}say which band is which (an R,G,B,NIR or B,G,R,NIR file "
        f"reads wrongly as RGB + alpha); tag the bands, or {bands_fix.format(path=path)}"
    ]


def _declared_bands(
    src: DatasetReader,
    path: Path | str,
    declared: RasterBandMap,
    tagged_rgb: list[int] | None,
    alpha: int | None,
) -> tuple[RasterBandMap | None, list[str]]:
    """The contract's explicit band map checked against the file: its bands exist, its colour interpretation agrees."""
    problems = []
    beyond = [b for b in [*declared.rgb, declared.alpha] if b is not None and b >= src.count]
    if beyond:
        problems.append(f"{path}: {src.count} bands; the band map names band(s) {beyond} (0-based)")
    if tagged_rgb is not None and tagged_rgb != declared.rgb:
        problems.append(
            f"{path}: the file's colour interpretation puts R, G, B in bands {tagged_rgb}, the band map in "
            f"{declared.rgb}; fix the map (or the file's colour interpretation)"
        )
    if alpha is not None and declared.alpha is not None and alpha != declared.alpha:
        problems.append(f"{path}: band {alpha} is marked alpha, the band map says {declared.alpha}")
    if problems:
        return None, problems
    return RasterBandMap(rgb=list(declared.rgb), alpha=declared.alpha if declared.alpha is not None else alpha), []


def _pixel_size(src: DatasetReader) -> tuple[float, float]:
    t = src.transform
    return abs(t.a), abs(t.e)


def grid_problems(
    src: DatasetReader, path: Path | str, contract: RasterContract, fixes: RasterFixes, *, fixable: bool = True
) -> list[str]:
    """Why the raster's georeferencing does not fit the contract (empty: it fits), the fix of each problem in the
    words of ``fixes``. ``fixable`` False: the raster is one the fixes' command refuses (too few bands, not 8-bit), so
    a fix that runs a command on it is not offered; the same fix is said once, after the last problem it fixes."""
    from rasterio.crs import CRS

    found: list[tuple[str, str]] = []  # (problem, its fix)
    crs = None if contract.crs is None else CRS.from_user_input(contract.crs)
    if src.crs is None:
        found.append((f"{path}: has no CRS (the model was trained on {contract.crs or 'georeferenced'} rasters)", ""))
    elif crs is not None and src.crs != crs:
        fix = fixes.geographic if src.crs.is_geographic else fixes.crs
        found.append((f"{path}: CRS {src.crs.to_string()}, {fixes.crs_is.format(crs=contract.crs)}", fix))
    t = src.transform
    rotated = t.b != 0 or t.d != 0
    if rotated:
        found.append((f"{path}: rotated or sheared grid {tuple(t)[:6]}", fixes.rotated))
    if contract.pixel_size is not None and src.crs is not None and not rotated and _same_units(src.crs, crs):
        for axis, size in zip(("x", "y"), _pixel_size(src), strict=True):
            if abs(size / contract.pixel_size - 1.0) > contract.pixel_size_tolerance:
                expected = fixes.pixel_size_is.format(size=contract.pixel_size)
                found.append(
                    (
                        f"{path}: pixel size {size:.6g} ({axis}) differs from {expected} by more than "
                        f"{contract.pixel_size_tolerance:.0%}",
                        fixes.pixel_size,
                    )
                )
                break
    if fixes.runs_a_command and not (fixable and src.crs is not None):
        found = [(problem, "") for problem, _ in found]
    said = [fix for _, fix in found]
    return [
        f"{problem}; {fix.format(path=path, crs=src.crs.to_string() if src.crs else None)}"
        if fix and fix not in said[k + 1 :]
        else problem
        for k, (problem, fix) in enumerate(found)
    ]


def _same_units(crs: Any, trained: Any) -> bool:
    """Whether pixel sizes in ``crs`` compare with the training pixel size: the training CRS (or none recorded),
    or another projected CRS of the same linear unit (UTM metres against Web Mercator metres)."""
    if trained is None or crs == trained:
        return True
    return bool(crs.is_projected and trained.is_projected and crs.linear_units == trained.linear_units)


def same_grid(a: DatasetReader, b: DatasetReader) -> bool:
    """Whether two rasters share size, CRS and transform (to 1e-6 pixel)."""
    if (a.height, a.width) != (b.height, b.width) or a.crs != b.crs:
        return False
    ta, tb = a.transform, b.transform
    px = max(abs(ta.a), abs(ta.e), 1e-12)
    return all(math.isclose(x, y, rel_tol=0.0, abs_tol=GRID_TOLERANCE_PX * px) for x, y in zip(ta, tb, strict=True))


@dataclass
class CheckedRaster:
    """An RGB raster (and its EXTRA raster) checked against a contract; read windows of its bound channels."""

    path: Path
    extra_path: Path | None
    src: DatasetReader
    extra: DatasetReader | None
    bands: RasterBandMap
    binding: InputBinding

    @property
    def height(self) -> int:
        return int(self.src.height)

    @property
    def width(self) -> int:
        return int(self.src.width)

    @property
    def profile(self) -> dict[str, Any]:
        return dict(self.src.profile)

    def read(self, window: Any = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """(3, h, w) uint8 RGB, (E, h, w) float32 EXTRA (None without EXTRA channels) and the (h, w) bool valid
        mask of a window (None: the whole raster). EXTRA pixels at NoData are returned as 0 (never NaN)."""
        rgb = self.src.read([b + 1 for b in self.bands.rgb], window=window)
        valid = valid_mask(self.src, self.bands, window, rgb=rgb)
        if self.extra is None:
            return rgb, None, valid
        extra = self.extra.read([b + 1 for b in self.binding.extra_bands], window=window).astype(np.float32)
        declared = _extra_nodata(self.extra)
        if declared is not None:
            hit = np.isnan(extra) if math.isnan(declared) else extra == np.float32(declared)
            valid &= ~hit.any(axis=0)
        extra[:, ~valid] = 0.0
        return rgb, extra, valid

    def nonfinite_extra(self) -> int:
        """Valid pixels (by the NoData rule) whose bound EXTRA bands hold NaN or inf, counted block by block."""
        if self.extra is None:
            return 0
        bad = 0
        for _, window in self.extra.block_windows(1):
            ex = self.extra.read([b + 1 for b in self.binding.extra_bands], window=window)
            nonfinite = ~np.isfinite(ex).all(axis=0)
            if not nonfinite.any():
                continue
            valid = valid_mask(self.src, self.bands, window)
            declared = _extra_nodata(self.extra)
            if declared is not None:
                valid &= ~(np.isnan(ex) if math.isnan(declared) else ex == np.float32(declared)).any(axis=0)
            bad += int((nonfinite & valid).sum())
        return bad


def valid_mask(
    src: DatasetReader, bands: RasterBandMap, window: Any = None, rgb: np.ndarray | None = None
) -> np.ndarray:
    """(h, w) bool: the valid pixels of a window of an RGB raster (None: the whole raster) by the one NoData rule,
    the first that applies (module docstring): the alpha band (> 0); a per-dataset mask (GDAL internal mask or
    ``.msk``); the declared nodata of the mapped R, G, B bands (NoData where all of them equal it); else all valid.

    GDAL's dataset mask is not used as such: for a 4-band file whose first band is red it is band 4's mask, so an
    R,G,B,NIR file with ``nodata=0`` would lose every pixel where NIR is 0. ``rgb``: the mapped bands' pixels of the
    window when the caller has read them already (not read twice)."""
    from rasterio.enums import MaskFlags

    if bands.alpha is not None:
        return np.asarray(src.read(bands.alpha + 1, window=window) > 0)
    flags = src.mask_flag_enums[bands.rgb[0]]
    if MaskFlags.per_dataset in flags and MaskFlags.alpha not in flags and MaskFlags.nodata not in flags:
        return np.asarray(src.read_masks(bands.rgb[0] + 1, window=window) > 0)  # internal or .msk mask
    declared = [(k, float(v)) for k, v in enumerate(src.nodatavals[b] for b in bands.rgb) if v is not None]
    if not declared:
        return np.ones(_window_shape(src, window) if rgb is None else rgb.shape[1:], bool)
    if rgb is None:
        rgb = src.read([b + 1 for b in bands.rgb], window=window)
    nodata_px = np.ones(rgb.shape[1:], bool)
    for k, value in declared:
        nodata_px &= np.isnan(rgb[k]) if math.isnan(value) else rgb[k] == value
    return ~nodata_px


def _window_shape(src: DatasetReader, window: Any) -> tuple[int, int]:
    """(h, w) of a window of ``src`` (a rasterio Window, ``((row0, row1), (col0, col1))`` or None: the raster)."""
    from rasterio.windows import Window

    if window is None:
        return int(src.height), int(src.width)
    w = window if isinstance(window, Window) else Window.from_slices(*window)
    return round(w.height), round(w.width)


def _extra_nodata(ds: DatasetReader) -> float | None:
    nodata = ds.nodata
    return None if nodata is None else float(nodata)


@contextmanager
def open_checked(
    contract: RasterContract,
    binding: InputBinding,
    rgb_path: str | Path,
    extra_path: str | Path | None = None,
    *,
    check_finite: bool = True,
    fixes: RasterFixes = PREDICT_FIXES,
) -> Iterator[CheckedRaster]:
    """Open an RGB raster (and the EXTRA raster its binding needs), check both against ``contract`` and yield a
    :class:`CheckedRaster`; every mismatch found is listed in one :class:`RasterContractError` (files named), each
    with its fix in the words of ``fixes`` (default: rts predict's and rts drift's command line).

    ``check_finite`` scans the EXTRA bands for undeclared non-finite values (one pass over the EXTRA raster)."""
    rgb_path = Path(rgb_path)
    with ExitStack() as stack:
        src = stack.enter_context(_open_raster(rgb_path))
        bands, problems = _rgb_problems(src, rgb_path, contract, fixes)
        extra = None
        if binding.extra_bands and (extra_path is None or not Path(extra_path).is_file()):
            problems.append(
                f"{rgb_path}: the model needs EXTRA channels {binding.extra_names}, but the EXTRA raster "
                f"{extra_path} was not found"
            )
        elif binding.extra_bands:
            extra_path = Path(extra_path or "")
            try:
                extra = stack.enter_context(_open_raster(extra_path))
            except RasterContractError as err:
                problems.append(str(err))
            else:
                problems += _extra_problems(src, rgb_path, extra, extra_path, binding, contract)
        if problems or bands is None:
            raise RasterContractError("; ".join(problems) if len(problems) < 3 else "\n  " + "\n  ".join(problems))
        checked = CheckedRaster(rgb_path, None if extra is None else Path(extra_path or ""), src, extra, bands, binding)
        if check_finite and extra is not None:
            bad = checked.nonfinite_extra()
            if bad:
                raise RasterContractError(
                    f"{extra_path}: {bad:,} valid pixels hold NaN or inf in the bound EXTRA bands "
                    f"{binding.extra_names}; declare the raster's nodata (e.g. nodata=nan) so they are NoData, or "
                    "mask them in the RGB raster's alpha"
                )
        yield checked


def _open_raster(path: Path) -> DatasetReader:
    """``path`` opened with rasterio (a context manager); one that cannot be read is a RasterContractError."""
    import rasterio

    try:
        return rasterio.open(path)
    except rasterio.errors.RasterioIOError as err:
        raise RasterContractError(f"{path}: not a readable raster ({err})") from None


def _rgb_problems(
    src: DatasetReader, rgb_path: Path, contract: RasterContract, fixes: RasterFixes
) -> tuple[RasterBandMap | None, list[str]]:
    """The RGB raster's bands (None: they cannot be told apart), and everything it breaks of ``contract`` at once:
    its grid (CRS, rotation, pixel size), its bands, its RGB dtype; a grid fix that runs a command (rts warp) only for
    a raster whose bands and dtype that command takes."""
    bands, problems = band_problems(src, rgb_path, contract.rgb_bands, fixes.bands)
    interp = [ci.name for ci in src.colorinterp]
    colour = bands.rgb if bands is not None else [i for i in range(src.count) if interp[i] != "alpha"]
    dtypes = sorted({src.dtypes[b] for b in colour})
    if dtypes != [contract.rgb_dtype]:
        problems.append(
            f"{rgb_path}: {'RGB bands' if bands is not None else 'bands'} are {', '.join(dtypes)}, the model was "
            f"trained on {contract.rgb_dtype} (0-255): convert it to 8-bit as the training imagery was (no silent "
            "rescaling)"
        )
    fixable = bands is not None and dtypes == [contract.rgb_dtype]
    return bands, grid_problems(src, rgb_path, contract, fixes, fixable=fixable) + problems


def _extra_problems(
    src: DatasetReader,
    rgb_path: Path,
    extra: DatasetReader,
    extra_path: Path,
    binding: InputBinding,
    contract: RasterContract,
) -> list[str]:
    """What the EXTRA raster breaks: the RGB raster's grid, the bands the binding names, the EXTRA dtype."""
    problems = []
    if not same_grid(src, extra):
        problems.append(
            f"{extra_path}: not on the grid of {rgb_path} (size {extra.height}x{extra.width} vs "
            f"{src.height}x{src.width}, CRS {extra.crs} vs {src.crs}, transform {tuple(extra.transform)[:6]} "
            f"vs {tuple(src.transform)[:6]})"
        )
    missing = unreadable_extra(binding, extra.count)
    if missing:
        problems.append(
            f"{extra_path}: {extra.count} bands; EXTRA channels "
            f"{', '.join(f'{c.name}=band {c.band}' for c in missing)} are beyond them"
        )
    else:
        ex_dtypes = sorted({extra.dtypes[b] for b in binding.extra_bands})
        if ex_dtypes != [contract.extra_dtype]:
            problems.append(
                f"{extra_path}: EXTRA bands are {', '.join(ex_dtypes)}, the model was trained on {contract.extra_dtype}"
            )
    return problems
