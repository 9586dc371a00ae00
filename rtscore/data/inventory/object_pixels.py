"""The inventory ids of a tile as metadata.csv and the tile store carry them: ``;``-joined id lists (``UIDs``,
``NegativeUIDs``) and ``ObjectPixels``, one ``<uid>@<row>,<col>`` entry per RTS of the tile: a pixel (0-based row and
column of the tile) inside that RTS's label-1 area. A ground-truth object of the label (a connected component of
label 1) is named by the ids whose pixel it holds (docs/store-format.md#inventory-identity)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from rtscore.errors import PipelineError

SEPARATOR = ";"  # between the ids of a list and between ObjectPixels entries
_ENTRY = re.compile(r"^(?P<uid>[^@;]+)@(?P<row>\d+),(?P<col>\d+)$")


class ObjectPixelsError(PipelineError, ValueError):
    """An ``ObjectPixels`` text that is not ``<uid>@<row>,<col>`` entries; the message names the entry."""


@dataclass(frozen=True)
class ObjectPixel:
    """One ``ObjectPixels`` entry: the inventory id and a pixel of its label-1 area (0-based, of the tile)."""

    uid: str
    row: int
    col: int

    def __str__(self) -> str:
        return f"{self.uid}@{self.row},{self.col}"


def split_ids(text: str) -> list[str]:
    """The ids of a ``;``-joined list (``UIDs``, ``NegativeUIDs``), blanks dropped; ``""`` is none."""
    return [u.strip() for u in text.split(SEPARATOR) if u.strip()]


def join_ids(ids: Iterable[str]) -> str:
    """The ``;``-joined text of ``ids``, in their order."""
    return SEPARATOR.join(ids)


def parse_object_pixels(text: str) -> list[ObjectPixel]:
    """The entries of an ``ObjectPixels`` text (``""``: none).

    Raises:
        ObjectPixelsError: an entry that is not ``<uid>@<row>,<col>`` (row and column non-negative integers).
    """
    out = []
    for raw in text.split(SEPARATOR):
        entry = raw.strip()
        if not entry:
            continue
        m = _ENTRY.match(entry)
        if m is None:
            raise ObjectPixelsError(f"entry {entry!r} is not <uid>@<row>,<col> (e.g. 'a1b2@12,40')")
        out.append(ObjectPixel(m["uid"].strip(), int(m["row"]), int(m["col"])))
    return out


def format_object_pixels(pixels: Iterable[ObjectPixel]) -> str:
    """The ``ObjectPixels`` text of ``pixels``, in their order (:func:`parse_object_pixels` reads it back)."""
    return SEPARATOR.join(str(p) for p in pixels)


def rotated_object_pixels(text: str, k: int, size: int) -> str:
    """``text``'s pixels where they lie once the ``size`` x ``size`` tile is rotated by ``np.rot90(tile, k)``
    (counter-clockwise quarter turns: pixel (r, c) goes to (size - 1 - c, r) per turn)."""
    pixels = parse_object_pixels(text)
    for _ in range(k % 4):
        pixels = [ObjectPixel(p.uid, size - 1 - p.col, p.row) for p in pixels]
    return format_object_pixels(pixels)
