"""The scenes of an `rts tile` run: their paths (globs expanded, config order kept), every header checked (CRS, RGB
bands and dtype, the bands EXTRA names, companion rasters) and each scene's native pixel against the grid's, before
any pixel is read."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from rtscore.config.tiling import TilingConfig
from rtscore.data.raster.bands import RasterContractError, resolve_bands
from rtscore.data.tiling.pixels import Datasets, Scene, TilingError


def scene_paths(patterns: Sequence[str]) -> list[Path]:
    """The scenes of ``patterns`` (paths or globs), in order, each once; a pattern matching nothing is an error."""
    import glob

    out: list[Path] = []
    for pattern in patterns:
        found = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        found = [f for f in found if Path(f).is_file()]
        if not found:
            raise TilingError(f"scenes: {pattern} matches no file")
        out += [Path(f) for f in found if Path(f) not in out]
    return out


def check_scenes(cfg: TilingConfig, datasets: Datasets) -> list[Scene]:
    """Every scene's header checked (CRS, R, G, B bands and their dtype, bands the EXTRA sources name), before any
    pixel is read; all problems in one :class:`TilingError`."""
    from rasterio.warp import transform_bounds

    problems: list[str] = []
    scenes: list[Scene] = []
    scene_bands = sorted({s.band for e in cfg.extra for s in e.sources if s.path is None})
    for path in scene_paths(cfg.scenes):
        src = datasets.get(path)
        if src.crs is None:
            problems.append(f"{path}: has no CRS; rts tile cannot place it on the grid (assign its CRS first)")
            continue
        try:
            bands = resolve_bands(src, path, cfg.rgb_bands)
        except RasterContractError as err:
            problems.append(str(err))
            continue
        dtypes = sorted({src.dtypes[b] for b in bands.rgb})
        if dtypes != ["uint8"]:
            problems.append(
                f"{path}: RGB bands are {', '.join(dtypes)}; the tile layout holds 8-bit RGB as the training imagery "
                "(convert it to 8-bit first: no silent rescaling)"
            )
        beyond = [b for b in scene_bands if b >= src.count]
        if beyond:
            problems.append(f"{path}: {src.count} bands; extra (nir/red/band) names scene band(s) {beyond} (0-based)")
        bounds = transform_bounds(src.crs, cfg.grid.crs, *src.bounds, densify_pts=21)
        scenes.append(Scene(path, tuple(float(v) for v in bounds), bands))  # type: ignore[arg-type]
    for path in sorted({Path(s.path) for e in cfg.extra for s in e.sources if s.path is not None}):
        if not path.is_file():
            problems.append(f"{path}: companion raster (extra) not found")
            continue
        src = datasets.get(path)
        if src.crs is None:
            problems.append(f"{path}: companion raster has no CRS; it cannot be placed on the grid")
        wanted = [s.band for e in cfg.extra for s in e.sources if s.path is not None and Path(s.path) == path]
        if max(wanted) >= src.count:
            problems.append(f"{path}: {src.count} bands; extra names band {max(wanted)} (0-based)")
    if problems:
        raise TilingError("; ".join(problems) if len(problems) < 3 else "\n  " + "\n  ".join(problems))
    return scenes


# A scene downsampled more than this with a point kernel (bilinear, cubic, nearest) aliases: `average` reads every
# source pixel a tile pixel covers.
MAX_DOWNSAMPLE_WITHOUT_AVERAGE = 2.0


def native_pixel_size(path: Path, datasets: Datasets, grid_crs: str) -> tuple[float, float]:
    """A scene's pixel (x, y) in grid CRS units, measured at its centre: one pixel step along each axis of its own
    grid, carried into the grid CRS (so a UTM scene's 3 m are 7.1 Web Mercator units at 65 deg N)."""
    from rasterio.warp import transform

    src = datasets.get(path)
    col, row = src.width / 2, src.height / 2
    points = [src.transform @ (col, row), src.transform @ (col + 1, row), src.transform @ (col, row + 1)]
    xs, ys = transform(src.crs, grid_crs, [p[0] for p in points], [p[1] for p in points])
    return math.hypot(xs[1] - xs[0], ys[1] - ys[0]), math.hypot(xs[2] - xs[0], ys[2] - ys[0])


def check_resampling(cfg: TilingConfig, scenes: Sequence[Scene], datasets: Datasets) -> list[str]:
    """Each scene's native pixel against the grid's, before any tile is written.

    Returns:
        One warning per scene downsampled more than :data:`MAX_DOWNSAMPLE_WITHOUT_AVERAGE` with a resampling
        other than ``average``.

    Raises:
        TilingError: every scene the grid upsamples by more than ``grid.max_resample_factor``, each with its native
            pixel size, the factor and the two fixes.
    """
    grid = cfg.grid
    problems: list[str] = []
    warnings: list[str] = []
    for scene in scenes:
        src = datasets.get(scene.path)
        gx, gy = native_pixel_size(scene.path, datasets, grid.crs)
        up = max(gx, gy) / grid.pixel_size
        down = grid.pixel_size / min(gx, gy)
        units = src.crs.linear_units if src.crs.is_projected else "degrees"
        native = f"{abs(src.transform.a):g} x {abs(src.transform.e):g} {units} ({src.crs.to_string()})"
        if up > grid.max_resample_factor:
            problems.append(
                f"{scene.path}: native pixel {native}, {gx:.3g} x {gy:.3g} in {grid.crs} units at the scene centre; "
                f"grid.pixel_size {grid.pixel_size:g} upsamples it {up:.1f}x, more than grid.max_resample_factor "
                f"{grid.max_resample_factor:g}: set grid.pixel_size to about {max(gx, gy):.3g} (its native size), or "
                f"raise grid.max_resample_factor to {math.ceil(up * 10) / 10:g}"
            )
        elif down > MAX_DOWNSAMPLE_WITHOUT_AVERAGE and cfg.resampling != "average":
            warnings.append(
                f"{scene.path}: native pixel {native}, {gx:.3g} x {gy:.3g} in {grid.crs} units; grid.pixel_size "
                f"{grid.pixel_size:g} downsamples it {down:.1f}x with {cfg.resampling} resampling, which reads a few "
                "source pixels per tile pixel and aliases: set resampling: average"
            )
    if problems:
        head = f"grid: {len(problems)} scene(s) would be upsampled more than {grid.max_resample_factor:g}x"
        raise TilingError(head + ":\n  " + "\n  ".join(problems))
    return warnings
