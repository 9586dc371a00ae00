"""The scenes of an `rts tile` run: their paths (globs expanded, config order kept) and every header checked
(CRS, RGB bands and dtype, the bands EXTRA names, companion rasters) before any pixel is read."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rtscore.config.tiling import TilingConfig
from rtscore.data.bands import RasterContractError, resolve_bands
from rtscore.data.tile_pixels import Datasets, Scene, TilingError


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
