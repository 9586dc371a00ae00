"""The incremental merge's state on disk, per spatial block (docs/mapping.md, "The finish: fetching and merging").

A campaign of 10^5 quads has ~10^6 objects: a state read and rewritten whole at every finish costs a quarter of a
finish that added 1 % of the scenes. So the merged objects are kept by *block*, a square of :data:`BLOCK_M` metres
of the campaign CRS (an object belongs to the block of its bounds' lower-left corner), one file each; a finish
rewrites the blocks whose objects changed and reads the others' columns only (never their geometries as shapes).

Files, both in one raw format (:func:`write_raw`): a magic line, the length of a JSON header, the header (the
file's own fields and each array's name, dtype and shape, with the CRC-32 of the arrays' bytes), then the arrays'
bytes one after the other: read with one ``read`` and ``np.frombuffer`` slices (an ``.npz`` costs ~30 times more per
file, too much for thousands of blocks).

- the *head* (``merge-state``): what is one per campaign (code identity, CRS, finest pixel, size-bin edges, block
  size), the done scenes in order with their parts sha256s, footprints (WKB) and parts' bounds, for each scene the
  blocks holding objects with a part in it, and for each block its CRC-32 and object count;
- a *block* (``merge-state.blocks/<bx>_<by>``): its objects' member parts, geometries (WKB), partial and cut flags,
  and their rows' figures and scene ids (the JSON text the layer writes).

The head is written last; a block whose CRC-32 is not the one the head holds for it (a finish killed between
writing blocks and the head, a damaged file) makes the state unusable: a full merge rebuilds it. It is a cache.
"""

from __future__ import annotations

import json
import math
import os
import uuid
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.raster.ground import GroundScale
from rtscore.storage.files import os_errors

BLOCK_M = 131_072.0  # a block's side in metres of the campaign CRS's unit (~44 quads of 4096 px at 4.77 m)
MAGIC = b"rts-merge-state 1\n"
LEGACY = "merge-state.npz"  # the one-file state written before blocks (schema 3): removed by a full merge


def block_size(crs: Any) -> float:
    """A block's side in the units of ``crs`` (projected)."""
    return BLOCK_M / GroundScale.of(crs, "campaign CRS").unit_m


def block_names(bounds: np.ndarray, size: float) -> list[str]:
    """The block of each box ``(minx, miny, maxx, maxy)`` (rows of ``bounds``): its lower-left corner's."""
    if len(bounds) == 0:
        return []
    ix = np.floor(bounds[:, 0] / size).astype(np.int64).tolist()
    iy = np.floor(bounds[:, 1] / size).astype(np.int64).tolist()
    return [f"{x}_{y}" for x, y in zip(ix, iy, strict=True)]


def blocks_dir(head: Path) -> Path:
    return head.with_name(head.name + ".blocks")


def write_raw(path: Path, fields: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> int:
    """``fields`` (JSON) and ``arrays`` as one file (module docstring), under a temporary name renamed into place
    (not synced: a cache whose damage the CRC-32 finds). Returns the arrays' CRC-32."""
    parts = [_raw(a) for a in arrays.values()]
    crc = 0
    for b in parts:
        crc = zlib.crc32(b.data, crc)
    index = [[k, a.dtype.str, list(a.shape)] for k, a in arrays.items()]
    head = json.dumps({"fields": fields, "arrays": index, "crc32": crc}, allow_nan=False).encode()
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    with os_errors("write", path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with tmp.open("wb") as f:
                f.write(MAGIC + len(head).to_bytes(8, "little") + head)
                for b in parts:
                    f.write(b.data)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)
    return crc


def _raw(a: np.ndarray) -> np.ndarray:
    """``a``'s bytes as a flat uint8 array (no copy where ``a`` is contiguous)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def read_raw(path: Path, crc: int | None = None) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(fields, arrays) of a file :func:`write_raw` wrote; ``crc``: the CRC-32 its arrays must have.

    Raises:
        ValueError: not such a file, torn, or its bytes not those it was written with (or not ``crc``).
        OSError: it cannot be read.
    """
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError("not a merge state file")
    at = len(MAGIC)
    n = int.from_bytes(data[at : at + 8], "little")
    head = json.loads(data[at + 8 : at + 8 + n])
    off = at + 8 + n
    arrays: dict[str, np.ndarray] = {}
    got = 0
    for name, dtype, shape in head["arrays"]:
        dt = np.dtype(dtype)
        count = math.prod(shape)
        if off + count * dt.itemsize > len(data):
            raise ValueError("torn: shorter than its header says")
        a = np.frombuffer(data, dtype=dt, count=count, offset=off).reshape(shape)
        got = zlib.crc32(_raw(a).data, got)
        off += a.nbytes
        arrays[name] = a
    if off != len(data):
        raise ValueError("longer than its header says")
    if got != head["crc32"] or (crc is not None and got != crc):
        raise ValueError("its bytes are not those it was written with (CRC-32)")
    return head["fields"], arrays


def remove(path: Path) -> None:
    with os_errors("remove", path):
        path.unlink(missing_ok=True)


def clear_blocks(head: Path) -> None:
    """Remove every block file (a full merge writes them all again), and a head at ``head`` that is not a file."""
    d = blocks_dir(head)
    remove(head.with_name(LEGACY))
    if head.is_dir():
        import shutil

        shutil.rmtree(head, ignore_errors=True)
    if d.is_dir():
        for p in d.iterdir():
            remove(p)
    elif d.exists():
        remove(d)
    os.makedirs(d, exist_ok=True)
