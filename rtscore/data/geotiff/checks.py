"""Every file of every tile of a split checked against the raster contract, before anything is written."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rtscore.config.binding import InputBinding, RasterContract
from rtscore.data.geotiff.labels import read_label
from rtscore.data.geotiff.root import MAX_LISTED, METADATA_CSV, GeotiffError, TileEntry, tile_files
from rtscore.data.inventory.object_pixels import parse_object_pixels
from rtscore.data.raster.bands import RGB_DIR, TILE_FIXES, RasterContractError, open_checked
from rtscore.data.raster.ground import GroundSizeError, ground_pixel_area_m2
from rtscore.data.tiles import IGNORE_INDEX

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckedTiles:
    """What checking a split's tiles established: the contract they all meet (CRS, the data's pixel size) and
    each tile's ground pixel area."""

    contract: RasterContract
    pixel_area_m2: dict[str, float]


@dataclass(frozen=True)
class _TileFacts:
    pixel_size: tuple[float, float]  # |a|, |e| in CRS units
    pixel_area_m2: float
    off_label: list[str]  # ObjectPixels entries not on an RTS pixel of the label


def check_tiles(
    root: Path, entries: list[TileEntry], tile_size: int, binding: InputBinding, contract: RasterContract
) -> CheckedTiles:
    """Check every file of every tile against ``contract`` before anything is written.

    Each tile: its RGB (+ EXTRA) raster through :func:`~rtscore.data.raster.bands.open_checked` (CRS, bands, dtypes,
    EXTRA on the RGB grid, non-finite EXTRA values), its size, its label (a raster on the RGB grid with values in
    {0, 1, 255}, or polygons reprojected to the tile's CRS), and a positive tile's label must hold RTS pixels.
    Then the pixel sizes: all within ``contract.pixel_size_tolerance`` of the contract's, or (None) of their
    median, which the returned contract records.

    Raises:
        GeotiffError: listing every problem found (up to 20), each naming the tile and the file.
    """
    problems: list[str] = []
    facts: dict[str, _TileFacts] = {}
    for e in entries:
        found = _check_tile(root, e, tile_size, binding, contract)
        if isinstance(found, list):
            problems += found
        else:
            facts[e.tile_id] = found
        if len(problems) >= MAX_LISTED:
            break
    if not problems:
        contract, problems = _agreed_pixel_size(root, facts, contract, bool(binding.extra_bands))
        _warn_off_label(facts)
    if problems:
        raise GeotiffError(f"{len(problems)} problem(s) in {root}:\n  " + "\n  ".join(problems[:MAX_LISTED]))
    return CheckedTiles(contract, {t: f.pixel_area_m2 for t, f in facts.items()})


def _check_tile(
    root: Path, e: TileEntry, tile_size: int, binding: InputBinding, contract: RasterContract
) -> _TileFacts | list[str]:
    """The facts of one tile, or its problems (each naming the tile and the file)."""
    files = tile_files(root, e.tile_id, bool(binding.extra_bands))
    try:
        with open_checked(contract, binding, files["rgb"], files.get("extra"), fixes=TILE_FIXES) as src:
            if (src.height, src.width) != (tile_size, tile_size):
                got = f"{src.height}x{src.width}"
                return [f"tile {e.tile_id} ({files['rgb']}): size must be {tile_size}x{tile_size}; got {got}"]
            label, problem = read_label(files["labels"], src, e)
            if problem is not None:
                return [problem]
            where = f"tile {e.tile_id} ({files['labels']})"
            if e.positive and not np.isin(label, (1, IGNORE_INDEX)).any():
                return [_empty_positive(where)]
            outside, off_label = _object_pixels_on_label(e, label)
            if outside:
                return [f"{where}: {outside}"]
            t = src.src.transform
            area = ground_pixel_area_m2(src.src.crs, t, src.height, src.width, str(files["rgb"]))
            return _TileFacts((abs(t.a), abs(t.e)), area, off_label)
    except (RasterContractError, GroundSizeError) as err:
        return [f"tile {e.tile_id}: {err}"]


def _object_pixels_on_label(e: TileEntry, label: np.ndarray) -> tuple[str | None, list[str]]:
    """The tile's ``ObjectPixels`` entries against its label: the first outside the tile, as a problem (None when
    each is inside), and those not on an RTS (label 1) pixel, which name no ground-truth object (a label redrawn
    after metadata.csv was written: a warning, :func:`_warn_off_label`). Their syntax was checked on selection."""
    h, w = label.shape
    off = []
    for p in parse_object_pixels(e.inventory.object_pixels):
        if not (0 <= p.row < h and 0 <= p.col < w):
            return (
                f"{METADATA_CSV} ObjectPixels entry {str(p)!r}: pixel ({p.row}, {p.col}) is outside the {h}x{w} tile",
                [],
            )
        if label[p.row, p.col] != 1:
            off.append(str(p))
    return None, off


def _warn_off_label(facts: dict[str, _TileFacts]) -> None:
    """One warning for every ``ObjectPixels`` entry not on an RTS pixel of its tile's label."""
    off = {t: f.off_label for t, f in facts.items() if f.off_label}
    if off:
        first = ", ".join(f"{t}: {e[0]!r}" for t, e in list(off.items())[:3])
        _log.warning(
            f"{sum(map(len, off.values()))} {METADATA_CSV} ObjectPixels entries of {len(off)} tile(s) are not on an "
            f"RTS (label 1) pixel of their tile's label (first: {first}): those ids name no ground-truth object in "
            "evaluation's per-object table; was the label redrawn after metadata.csv was written?"
        )


def _empty_positive(where: str) -> str:
    """A positive tile whose label holds no RTS (1) and no partial RTS (255): the metadata and the label disagree.
    A tile whose RTS are all cut by its edge (only 255) is a real positive tile and is accepted."""
    return (
        f"{where}: TrainClass is positive in {METADATA_CSV}, but the label has no RTS pixel (1 or partial 255); "
        "polygons in another CRS than declared, a label of another tile or a shifted grid give this: check the "
        "label, or make the tile negative"
    )


def _agreed_pixel_size(
    root: Path, facts: dict[str, _TileFacts], contract: RasterContract, with_extra: bool
) -> tuple[RasterContract, list[str]]:
    """The contract with the tiles' pixel size (the median, when the config gives none) and the tiles beyond the
    tolerance of it (open_checked already refused them against a configured pixel size)."""
    if contract.pixel_size is not None or not facts:
        return contract, []
    size = float(np.median([s for f in facts.values() for s in f.pixel_size]))
    tol = contract.pixel_size_tolerance
    outliers = [
        f"tile {t} ({root / RGB_DIR / f'{t}.tif'}): pixel size {f.pixel_size[0]:.6g} x {f.pixel_size[1]:.6g}, "
        f"the split's median is {size:.6g} (tolerance {tol:.0%})"
        for t, f in facts.items()
        if any(abs(s / size - 1.0) > tol for s in f.pixel_size)
    ]
    if outliers:
        outliers.append(
            "every tile of a split must share one pixel size (the model learns object sizes in pixels): cut the "
            "root again from its scenes with rts tile --config <tiling config> (one grid.pixel_size for every tile), "
            "or, for a difference the model may learn across, widen geotiff.pixel_size_tolerance in the generation "
            "config"
        )
    return contract.model_copy(update={"pixel_size": size}), outliers
