"""`rts warp`: scenes put on the tile grid a model was trained on, for `rts predict` and `rts map`, their pixels
those `rts tile` cuts (docs/geotiff.md, "Scenes for mapping: rts warp").

Rules:

* **Input.** The tiling config the training data was cut with: its ``scenes`` (or others given in their place),
  ``rgb_bands``, ``extra``, ``grid`` and ``resampling``. Its polygons, regions, splits and output are not read:
  mapping needs no inventory.
* **Pixels.** Every scene on its own is laid on the grid cells its footprint touches (a rectangle of whole cells);
  each cell's R, G, B, validity and EXTRA bands are :func:`rtscore.data.tiling.pixels.render_pixels` of that cell,
  the very call `rts tile` makes, so a warped scene equals, pixel for pixel, the tiles `rts tile` cuts from it
  alone (NDVI included). A cell without a valid pixel is NoData (alpha 0, RGB 0, EXTRA 0, as NoData pixels of a
  tile).
* **Outputs**, in the output directory, the layout `rts predict` and `rts map` read
  (:func:`rtscore.data.raster.bands.extra_candidates`): ``<stem>.tif``, R, G, B, alpha uint8, colour interpretation
  tagged; ``<stem>_extra.tif`` (with ``extra`` only), float32 in the config's ``extra`` order, band descriptions
  = names, declared nodata NaN; both Cloud-Optimized GeoTIFFs (deflate) on the grid CRS and pixel size.
* **Streamed.** Cells are rendered one at a time and written into tiled GeoTIFFs under hidden temporary names
  (``.<name>.partial``), which GDAL's COG driver copies block by block into the COGs, renamed into place; memory is
  one cell and its scene window, never the scene. On any error every temporary file is removed.
* **Done.** ``<stem>_warp.json`` (:class:`WarpedScene`) is written last; a scene whose manifest holds this run's
  identity (:func:`warp_identity`: the pixel code, the config's pixel settings, the scene's and companion
  rasters' listing identity) and whose files have the recorded sizes is skipped on a re-run; any other is warped
  again, its manifest removed first.
* **Checked first**, all problems in one :class:`WarpError` before anything is written: the scenes' headers (as
  `rts tile` checks them), output names that collide or would replace a scene, and with a package, the grid CRS
  and pixel size against its raster contract and the config's ``extra`` against its input binding.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

from rtscore.config.binding import ExtraChannel, RasterBandMap, RasterContract, binding_conflicts
from rtscore.config.tiling import TilingConfig
from rtscore.data.raster.bands import EXTRA_SUFFIX
from rtscore.data.tiling.pixels import (
    Datasets,
    GridCell,
    Scene,
    TilePixels,
    TilingError,
    grid_cells,
    render_pixels,
)
from rtscore.data.tiling.scenes import check_resampling, check_scenes, scene_paths
from rtscore.errors import PipelineError
from rtscore.identity import file_identity, resume_key
from rtscore.storage import atomic_write_json

log = logging.getLogger(__name__)

MANIFEST_SUFFIX = "_warp.json"
WRITTEN_BANDS = RasterBandMap(rgb=[0, 1, 2], alpha=3)  # the band layout of <stem>.tif
COG_BLOCK = 256
GDAL_CACHE_MB = 128  # GDAL's block cache while writing (its default is 5 % of the machine's RAM)


class WarpError(PipelineError, ValueError):
    """Scenes, a config or a package `rts warp` cannot use together; the message lists every problem."""


class WarpedScene(BaseModel):
    """``<stem>_warp.json``: one warped scene (written last: its presence, with this identity, means done)."""

    scene: str = Field(..., description="The scene warped (absolute path).")
    identity: str = Field(..., description="sha256 of the pixel code, the pixel settings and the input files.")
    files: dict[str, int] = Field(..., description="Files written (name in the output directory -> bytes).")
    extra_bands: list[str] = Field(..., description="EXTRA band names, in band order.")
    crs: str = Field(..., description="The grid CRS.")
    transform: list[float] = Field(..., description="Affine transform (a, b, c, d, e, f) of the outputs.")
    width: int = Field(..., description="Columns (cells x tile size).")
    height: int = Field(..., description="Rows (cells x tile size).")
    cells: int = Field(..., description="Grid cells covered.")
    valid_cells: int = Field(..., description="Cells with a valid pixel (the tiles `rts tile` would cut).")


class WarpSummary(BaseModel):
    """What a `rts warp` run found and wrote."""

    output: str = Field(..., description="The output directory.")
    scenes: list[WarpedScene] = Field(..., description="Every scene, in config order.")
    written: int = Field(..., description="Scenes warped by this run.")
    kept: int = Field(..., description="Scenes found complete (same identity) and skipped.")
    empty: int = Field(..., description="Scenes without a valid pixel on the grid (no raster written).")


# --------------------------------------------------------------------------------------------- checks


@dataclass(frozen=True)
class TrainedOn:
    """What a package's model was trained on, as far as `rts warp` checks it: its raster contract and the EXTRA
    channels it reads (name, band), read from its ``model_config.yaml`` by
    :func:`rtscore.package.verify.trained_on`; ``where`` names the package in messages."""

    contract: RasterContract
    extra: list[ExtraChannel]
    where: str


def package_problems(cfg: TilingConfig, trained: TrainedOn) -> list[str]:
    """Why scenes warped with ``cfg`` do not fit the package (empty: they fit): the grid CRS and pixel size
    against its raster contract (``model_config.yaml`` ``raster``, as `rts predict` checks inputs), the band layout
    written against its RGB band map, and the config's ``extra`` names and order against its input binding."""
    from rasterio.crs import CRS

    contract, where, bound = trained.contract, trained.where, trained.extra
    problems = []
    if contract.crs is not None and CRS.from_user_input(cfg.grid.crs) != CRS.from_user_input(contract.crs):
        problems.append(f"grid.crs {cfg.grid.crs}: {where} was trained on {contract.crs}")
    size, trained_size = cfg.grid.pixel_size, contract.pixel_size
    if trained_size is not None and abs(size / trained_size - 1.0) > contract.pixel_size_tolerance:
        problems.append(
            f"grid.pixel_size {size:g}: {where} was trained at {trained_size:g} (±{contract.pixel_size_tolerance:.0%})"
        )
    if contract.rgb_bands is not None and contract.rgb_bands != WRITTEN_BANDS:
        problems.append(
            f"{where} reads R, G, B from bands {contract.rgb_bands.rgb} and alpha from {contract.rgb_bands.alpha}; "
            f"rts warp writes them as bands {WRITTEN_BANDS.rgb} and {WRITTEN_BANDS.alpha} (give rts predict "
            "--rgb-bands 0,1,2,3)"
        )
    written = {e.name: i for i, e in enumerate(cfg.extra)}
    conflicts = binding_conflicts(bound, written)
    if conflicts:
        pairs = [(c.name, c.band) for c in bound]
        problems.append(
            f"extra: {'; '.join(conflicts)} (the package reads EXTRA channels {pairs} as (name, band); the config "
            f"writes {list(written.items())}: use the tiling config the training data was cut with)"
        )
    return problems


def _output_problems(paths: list[Path], out: Path, with_extra: bool, companions: set[Path]) -> list[str]:
    """Output names two scenes share, or that would replace an input."""
    problems = []
    owner: dict[str, Path] = {}
    inputs = {p.resolve() for p in [*paths, *companions]}
    for path in paths:
        for name in output_names(path.stem, with_extra):
            if name in owner:
                problems.append(f"{path} and {owner[name]} would both write {out / name}; rename one of them")
                continue
            owner[name] = path
            if (out / name).resolve() in inputs:
                problems.append(f"{out / name} would replace an input raster; choose another --output")
    return problems


def output_names(stem: str, with_extra: bool) -> list[str]:
    """The rasters of scene ``stem`` in the output directory: ``<stem>.tif`` (and ``<stem>_extra.tif``)."""
    return [f"{stem}.tif", *([f"{stem}{EXTRA_SUFFIX}.tif"] if with_extra else [])]


def warp_identity(cfg: TilingConfig, scene: Path) -> str:
    """The identity of one scene's warp: sha256 of the pixel code (this module's import closure, `rts tile`'s
    pixels included), the config's pixel settings (``rgb_bands``, ``extra``, ``grid``, ``resampling``, companion
    rasters by their listing identity) and the scene's listing identity (name, size, mtime, GDAL sidecars)."""
    settings = cfg.model_dump(mode="json", include={"rgb_bands", "extra", "grid", "resampling"})
    for band, band_doc in zip(cfg.extra, settings["extra"], strict=True):
        for key in ("nir", "red", "band"):
            source = getattr(band, key)
            if source is not None and source.path is not None:
                band_doc[key]["path"] = file_identity(Path(source.path))
    return resume_key(__name__, settings, file_identity(scene))


# --------------------------------------------------------------------------------------------- the run


def warp_scenes(
    cfg: TilingConfig,
    output: str | Path,
    *,
    scenes: Sequence[str] | None = None,
    package: TrainedOn | None = None,
) -> WarpSummary:
    """`rts warp`: every scene of ``cfg`` (or ``scenes``, paths or globs, in its place) onto the config's grid in
    ``output`` (module docstring); scenes already complete under this identity are skipped.

    Raises:
        WarpError: every problem found before writing: scene headers, colliding outputs, a package mismatch.
    """
    if scenes is not None:
        cfg = cfg.model_copy(update={"scenes": list(scenes)})
    out = Path(output)
    datasets = Datasets()
    try:
        checked = _checked_scenes(cfg, out, datasets, package)
        out.mkdir(parents=True, exist_ok=True)
        done: list[WarpedScene] = []
        kept = 0
        for scene in checked:
            identity = warp_identity(cfg, scene.path)
            record = complete_scene(out, scene.path.stem, identity)
            if record is not None:
                kept += 1
                log.info("rts warp: %s already warped (same scene and settings), kept", scene.path.name)
            else:
                record = warp_scene(scene, cfg, out, identity, datasets)
            done.append(record)
    finally:
        datasets.close()
    empty = sum(r.valid_cells == 0 for r in done)
    return WarpSummary(output=str(out), scenes=done, written=len(done) - kept, kept=kept, empty=empty)


def _checked_scenes(cfg: TilingConfig, out: Path, datasets: Datasets, package: TrainedOn | None) -> list[Scene]:
    """The scenes, their headers, the output names and the package checked; every problem in one WarpError."""
    problems: list[str] = []
    scenes: list[Scene] = []
    try:
        scenes = check_scenes(cfg, datasets)
        for warning in check_resampling(cfg, scenes, datasets):  # the rule rts tile applies to the same grid
            log.warning("rts warp: %s", warning)
    except TilingError as err:
        problems += [line.strip() for line in str(err).splitlines() if line.strip()]
    try:
        paths = scene_paths(cfg.scenes)
    except TilingError:  # a pattern matching nothing: check_scenes said so
        paths = []
    companions = {Path(s.path) for e in cfg.extra for s in e.sources if s.path is not None}
    problems += _output_problems(paths, out, bool(cfg.extra), companions)
    if package is not None:
        problems += package_problems(cfg, package)
    if problems:
        raise WarpError("; ".join(problems) if len(problems) < 3 else "\n  " + "\n  ".join(problems))
    return scenes


def complete_scene(out: Path, stem: str, identity: str) -> WarpedScene | None:
    """The scene's manifest when it holds ``identity`` and every file it lists has its recorded size, else None."""
    try:
        record = WarpedScene.model_validate_json((out / f"{stem}{MANIFEST_SUFFIX}").read_text())
    except (OSError, ValueError):
        return None
    if record.identity != identity:
        return None
    for name, size in record.files.items():
        f = out / name
        if not f.is_file() or f.stat().st_size != size:
            return None
    return record


def _layout(cells: list[GridCell]) -> tuple[int, int, int, int]:
    """(first column, top row, columns, rows) of the rectangle of ``cells``."""
    cols, rows = [c.col for c in cells], [c.row for c in cells]
    return min(cols), max(rows), max(cols) - min(cols) + 1, max(rows) - min(rows) + 1


def warp_scene(scene: Scene, cfg: TilingConfig, out: Path, identity: str, datasets: Datasets) -> WarpedScene:
    """One scene onto the grid: its cells rendered one by one into the outputs, then its manifest (written last).
    A scene without a valid pixel writes no raster (its manifest says so)."""
    from affine import Affine

    stem = scene.path.stem
    manifest = out / f"{stem}{MANIFEST_SUFFIX}"
    manifest.unlink(missing_ok=True)  # an earlier manifest never vouches for the files about to be written
    n, px = cfg.grid.tile_size, cfg.grid.pixel_size
    cells = grid_cells(scene.bounds, n, px)
    col0, row0, ncols, nrows = _layout(cells)
    span = n * px
    transform = Affine(px, 0.0, col0 * span, 0.0, -px, (row0 + 1) * span)
    names = output_names(stem, bool(cfg.extra))
    valid_cells = _write_rasters(scene, cfg, datasets, cells, (col0, row0), transform, [out / m for m in names])
    if valid_cells == 0:
        log.warning("rts warp: %s has no valid pixel on the grid; nothing written", scene.path)
    written = names if valid_cells else []
    for stale in output_names(stem, True):
        if stale not in written:
            (out / stale).unlink(missing_ok=True)  # of an earlier warp under other settings
    record = WarpedScene(
        scene=str(scene.path.resolve()),
        identity=identity,
        files={m: (out / m).stat().st_size for m in written},
        extra_bands=[e.name for e in cfg.extra],
        crs=cfg.grid.crs,
        transform=list(transform)[:6],
        width=ncols * n,
        height=nrows * n,
        cells=len(cells),
        valid_cells=valid_cells,
    )
    atomic_write_json(manifest, record.model_dump(mode="json"))
    if valid_cells:
        log.info(
            "rts warp: %s -> %s (%d x %d px, %d of %d cells with valid pixels)",
            scene.path.name,
            ", ".join(written),
            record.width,
            record.height,
            valid_cells,
            len(cells),
        )
    return record


def partial_path(final: Path) -> Path:
    """Where ``final`` is written before it is complete (hidden, beside it: `rts map` and `rts predict` skip it)."""
    return final.with_name(f".{final.name}.partial")


def _cell_arrays(px: TilePixels | None, n: int, n_extra: int) -> tuple[np.ndarray, np.ndarray]:
    """(4, n, n) uint8 R, G, B, alpha and (E, n, n) float32 EXTRA of a cell: the arrays `rts tile` writes
    (:func:`rtscore.data.tiling.files.write_tile`); a cell without a valid pixel (``px`` None) is NoData as a tile's
    NoData pixels are (RGB 0, alpha 0, EXTRA 0)."""
    if px is None:
        return np.zeros((4, n, n), np.uint8), np.zeros((n_extra, n, n), np.float32)
    alpha = np.where(px.valid, 255, 0).astype(np.uint8)
    rgba = np.concatenate([np.where(px.valid, px.rgb, 0).astype(np.uint8), alpha[None]])
    return rgba, (px.extra if px.extra is not None else np.zeros((n_extra, n, n), np.float32))


def _write_rasters(
    scene: Scene,
    cfg: TilingConfig,
    datasets: Datasets,
    cells: list[GridCell],
    origin: tuple[int, int],
    transform: Any,
    finals: list[Path],
) -> int:
    """Render every cell into tiled GeoTIFFs under temporary names, copy them into COGs and rename those into
    ``finals`` (RGB, then EXTRA); the cells with a valid pixel. With none, nothing is renamed into place."""
    import rasterio
    from rasterio.windows import Window

    n = cfg.grid.tile_size
    col0, row0 = origin
    partials = [partial_path(f) for f in finals]
    cogs = [Path(f"{p}.cog") for p in partials]
    valid_cells = 0
    try:
        with rasterio.Env(GDAL_CACHEMAX=GDAL_CACHE_MB), ExitStack() as stack:
            rgb, extra = _open_partials(stack, cfg, partials, _raster_profile(cfg, cells, origin, transform))
            for k, cell in enumerate(cells):
                window = Window((cell.col - col0) * n, (row0 - cell.row) * n, n, n)
                rgba, bands = _cell_arrays(render_pixels(cell, [scene], cfg, datasets), n, len(cfg.extra))
                valid_cells += bool(rgba[3].any())
                rgb.write(rgba, window=window)
                if extra is not None:
                    extra.write(bands, window=window)
                if (k + 1) % 100 == 0:
                    log.info("rts warp: %s: %d of %d cells", scene.path.name, k + 1, len(cells))
        if valid_cells:
            _publish_cogs(partials, cogs, finals)
    finally:
        for t in [*partials, *cogs]:
            t.unlink(missing_ok=True)
    return valid_cells


def _raster_profile(
    cfg: TilingConfig, cells: list[GridCell], origin: tuple[int, int], transform: Any
) -> dict[str, Any]:
    """The creation options both temporary GeoTIFFs share: the rectangle of ``cells`` from ``origin`` (first column,
    top row) on the grid, tiled in blocks that divide a cell (so a cell is written as whole blocks), deflate."""
    n = cfg.grid.tile_size
    col0, row0 = origin
    width = (max(c.col for c in cells) - col0 + 1) * n
    height = (row0 - min(c.row for c in cells) + 1) * n
    block = math.gcd(n, COG_BLOCK)  # tile sizes are multiples of 32: every cell is whole blocks
    base = {"driver": "GTiff", "width": width, "height": height, "crs": cfg.grid.crs, "transform": transform}
    base |= {"tiled": True, "blockxsize": block, "blockysize": block, "compress": "deflate", "bigtiff": "IF_SAFER"}
    return base


def _open_partials(
    stack: ExitStack, cfg: TilingConfig, partials: list[Path], profile: dict[str, Any]
) -> tuple[Any, Any]:
    """The temporary GeoTIFFs opened for writing, closed with ``stack``: R, G, B, alpha uint8 with their colour
    interpretation, and (with a second path) the EXTRA bands, float32, named in the config's order, nodata NaN
    (None without)."""
    import rasterio
    from rasterio.enums import ColorInterp

    rgb = stack.enter_context(rasterio.open(partials[0], "w", count=4, dtype="uint8", **profile))
    rgb.colorinterp = [ColorInterp.red, ColorInterp.green, ColorInterp.blue, ColorInterp.alpha]
    extra = None
    if len(partials) > 1:
        kw = {"count": len(cfg.extra), "dtype": "float32", "nodata": math.nan}
        extra = stack.enter_context(rasterio.open(partials[1], "w", **kw, **profile))
        for b, e in enumerate(cfg.extra, start=1):
            extra.set_band_description(b, e.name)
    return rgb, extra


def _publish_cogs(partials: list[Path], cogs: list[Path], finals: list[Path]) -> None:
    """Copy each complete temporary GeoTIFF block by block into a COG beside it, then rename the COGs into place:
    only once every copy succeeded, so a failed copy leaves no final raster without its companion."""
    import rasterio.shutil

    for partial, cog in zip(partials, cogs, strict=True):
        rasterio.shutil.copy(
            partial,
            cog,
            driver="COG",
            compress="deflate",
            blocksize=COG_BLOCK,
            overview_resampling="average",
            bigtiff="IF_SAFER",
        )
    for cog, final in zip(cogs, finals, strict=True):
        os.replace(cog, final)
