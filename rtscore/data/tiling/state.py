"""The resume state of an `rts tile` run in its output root: the run's identity and one record per finished tile.

``.rts-tile/`` holds the identity (:func:`rtscore.data.tiling.run.fingerprint`) of the run whose records it keeps and
a record per tile, written after the tile's files: a tile with a record and all its files is done. A root holding
the state of another identity is set aside, never resumed (:func:`prepare_output`).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from rtscore.data.geotiff.root import METADATA_CSV, SPLITS_YAML
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.data.tiling.pixels import TilingError
from rtscore.identity import SET_ASIDE_DIR, set_aside
from rtscore.storage import atomic_write_json, atomic_write_text

MANIFEST_JSON = "tiling.json"
STATE_DIR = ".rts-tile"  # the run's own bookkeeping: its identity and one record per finished tile
FINGERPRINT = "fingerprint"  # the file in STATE_DIR holding the identity of the run that wrote the records


class TileRecord(BaseModel):
    """A finished grid cell's record (``.rts-tile/tiles/<tile_id>.json``, written after its files): ``written`` (its
    files with their sizes, its metadata.csv row, the ids of the RTS labelled 1 in it), ``empty`` (no valid pixel)
    or ``sparse`` (valid pixels under min_valid_fraction: their fraction). A field its status has no use for is None
    and absent from the file (:func:`write_record`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tile_id: str = Field(..., description="The grid cell's tile id.")
    status: Literal["written", "empty", "sparse"] = Field(..., description="What became of the cell.")
    files: dict[str, int] = Field(..., description="Root-relative path -> bytes of each file written.")
    valid_fraction: float | None = Field(None, description="Valid pixels over all (sparse cells).")
    row: dict[str, str] | None = Field(None, description="Its metadata.csv row (written tiles).")
    uids: list[str] | None = Field(None, description="The RTS labelled 1 in it (written tiles).")

    @model_validator(mode="after")
    def _written_fields(self) -> TileRecord:
        if (self.status == "written") != (self.row is not None and self.uids is not None):
            raise ValueError(f"tile {self.tile_id}: a {self.status} record with row {self.row} and uids {self.uids}")
        return self

    @property
    def metadata_row(self) -> dict[str, str]:
        """The metadata.csv row of a written tile."""
        assert self.row is not None, f"tile {self.tile_id} is {self.status}: it has no metadata.csv row"
        return self.row

    @property
    def labelled(self) -> list[str]:
        """The RTS labelled 1 in a written tile (none in another)."""
        return self.uids or []


def record_path(root: Path, tile_id: str) -> Path:
    return root / STATE_DIR / "tiles" / f"{tile_id}.json"


def write_record(root: Path, record: TileRecord) -> None:
    """The tile's record, written (atomically) after its files."""
    atomic_write_json(record_path(root, record.tile_id), record.model_dump(mode="json", exclude_none=True))


def _read_record(path: Path) -> TileRecord:
    return TileRecord.model_validate_json(path.read_text())


def complete_record(root: Path, tile_id: str) -> TileRecord | None:
    """The record of a finished tile whose files are all there with their recorded sizes; else None (an
    unreadable record too: the tile is made again)."""
    path = record_path(root, tile_id)
    if not path.is_file():
        return None
    try:
        record = _read_record(path)
    except (OSError, ValidationError):
        return None
    for rel, size in record.files.items():
        f = root / rel
        if not f.is_file() or f.stat().st_size != size:
            return None
    return record


def run_paths(root: Path) -> list[Path]:
    """What a tiling run writes under its root: the layout and its own state (not the set-aside folder)."""
    state = root / STATE_DIR
    layout = [root / name for name in (RGB_DIR, EXTRA_DIR, LABEL_DIR, METADATA_CSV, SPLITS_YAML, MANIFEST_JSON)]
    return [*layout, state / "tiles", state / FINGERPRINT]


def prepare_output(root: Path, fp: str, *, overwrite: bool) -> Path | None:
    """Create ``root`` or reopen a run of the same identity ``fp`` (finished or not); clear stray temp files.

    A run of another identity (other code, settings or inputs) is never resumed: its tiles, records and lists
    are set aside into ``.rts-tile/set_aside/<UTC time>/`` (hidden: no reader of the data root lists it), named
    in one warning line, and the run starts fresh; with ``overwrite`` they are deleted instead. Returns the
    set-aside folder, if any.

    Raises:
        TilingError: ``root`` is not a directory, or holds something rts tile did not write.
    """
    state = root / STATE_DIR / FINGERPRINT
    ours = state.is_file()
    if root.exists() and not root.is_dir():
        raise TilingError(f"output {root} exists and is not a directory")
    if root.is_dir() and any(root.iterdir()) and not ours:
        raise TilingError(f"output {root} is not empty and was not written by rts tile; choose a new directory")
    aside = None
    if ours and overwrite:
        for p in run_paths(root):
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    elif ours and (old := state.read_text().strip()) != fp:
        aside = set_aside(
            run_paths(root),
            root / STATE_DIR / SET_ASIDE_DIR,
            base=root,
            what=f"the tiles and tile records of an earlier rts tile run in {root}",
            why=f"were cut by other code, settings or inputs (identity {old[:12]} vs {fp[:12]})",
        )
    atomic_write_text(state, fp + "\n")  # first: a directory holding our state dir is ours from here on
    for sub in (RGB_DIR, EXTRA_DIR, LABEL_DIR, f"{STATE_DIR}/tiles"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    for sub in (RGB_DIR, EXTRA_DIR, LABEL_DIR):
        for stray in (root / sub).glob(".*.tmp-*"):  # left by a killed run
            stray.unlink(missing_ok=True)
    return aside


def iter_records(root: Path) -> Iterator[TileRecord]:
    """The tile records of a tiling output (finished tiles), for inspection and tests."""
    for p in sorted((root / STATE_DIR / "tiles").glob("*.json")):
        yield _read_record(p)
