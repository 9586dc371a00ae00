"""The Zarr v3 tile store's format (docs/store-format.md): its names and versions, its layout, the published
attributes and the checks a store must pass to be read; the checked access to its zarr arrays and groups (a corrupt
chunk or member is a TileStoreError naming it). The reader is `rtscore.data.store.reader`, the writer
`rtscore.data.store.writer`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import ValidationError

from rtscore.data.store.attrs import StoreAttrs
from rtscore.errors import PipelineError

if TYPE_CHECKING:
    import zarr

FORMAT = "rts-tile-store"
# 1: one array per kind of pixel (images, alpha, labels_exact, labels_noisy, extra): a sample is 4 chunk reads.
# 2: the uint8 planes of a tile (R, G, B, alpha, labels) in one chunk of ``pixels``, the float32 EXTRA bands in
#    one chunk of ``extra``: a sample is 1 chunk read (RGB stores) or 2 (with EXTRA channels). Both read.
FORMAT_VERSION = 2
READ_VERSIONS = (1, 2)
PIXELS = "pixels"  # v2 uint8 array (n, planes, h, w); its zarr attribute ``planes`` names the planes
EXTRA = "extra"  # float32 array (n, E, h, w), both versions
V1_ARRAYS = ("images", "alpha", "labels_exact", "labels_noisy")
ATTRS_KEY = "rtscore"
PROGRESS_DIR = ".progress"
MASK_TYPES = ("exact", "noisy")


class TileStoreError(PipelineError):
    """A tile store is missing, incomplete, corrupt or inconsistent; the message names it."""


# Per-tile metadata arrays (readable without touching pixel chunks).
META_FIELDS: dict[str, Any] = {
    "tile_id": "str",
    "region": "str",
    "kind": np.uint8,
    "is_positive": np.bool_,
    "n_positive_px": np.int32,
    "n_positive_px_noisy": np.int32,
    "n_ignore_px": np.int32,
    "n_nodata_px": np.int32,
    "n_objects": np.int16,
    "source_index": np.int32,
    "rotation": np.uint8,
    "pixel_area_m2": np.float64,  # ground m² of one pixel of the tile (GeoTIFF: from its transform)
}
# Optional per-tile footprint, float64 (n, 4): minx, miny, maxx, maxy in the store's raster_contract CRS. Written
# by GeoTIFF ingestion (StoreLayout.write_bounds); absent from stores without geography (synthetic, legacy npz)
# and from stores written before it was recorded, which still read (the format version is unchanged: an added
# optional array that older readers ignore).
BOUNDS = "bounds"
# Optional per-tile inventory identity (docs/store-format.md#inventory-identity), written by GeoTIFF ingestion from
# metadata.csv (StoreLayout.write_inventory): the tile's RTS ids (UIDs), the ids of the mapped Negative polygons with
# a pixel in it (NegativeUIDs), one pixel of each RTS's label-1 area (ObjectPixels, `<uid>@<row>,<col>`), all
# ';'-joined, and its centre's latitude (centroid_lat, °N; NaN: unknown). Absent from stores without an inventory
# (synthetic, legacy npz, context stores) and from stores written before it was recorded, which still read (the
# format version is unchanged, as for BOUNDS).
INVENTORY_FIELDS: dict[str, Any] = {
    "uids": "str",
    "negative_uids": "str",
    "object_pixels": "str",
    "latitude": np.float64,
}


@dataclass(frozen=True)
class StoreLayout:
    """Shapes and codecs of a store, fixed when the staging store is created."""

    n_tiles: int
    tile_size: int
    extra_channel_names: tuple[str, ...]
    shard_tiles: int
    compressor: Literal["zstd", "lz4", "none"] = "zstd"
    clevel: int = 3
    write_noisy: bool = True
    write_bounds: bool = False  # meta/bounds: each tile's footprint in the store's CRS (GeoTIFF tiles)
    write_inventory: bool = False  # meta/ INVENTORY_FIELDS: each tile's inventory ids and latitude (GeoTIFF tiles)
    format_version: int = FORMAT_VERSION  # 1 writes the old layout (tests and bench/data_bench.py compare them)

    def __post_init__(self) -> None:
        if self.format_version not in READ_VERSIONS:
            raise TileStoreError(f"store format_version must be one of {READ_VERSIONS}; got {self.format_version}")

    @property
    def planes(self) -> list[str]:
        """The planes of a v2 ``pixels`` chunk, in order."""
        return pixel_planes(self.write_noisy)

    @property
    def n_shards(self) -> int:
        return -(-self.n_tiles // self.shard_tiles)

    def shard_range(self, shard: int) -> tuple[int, int]:
        start = shard * self.shard_tiles
        return start, min(start + self.shard_tiles, self.n_tiles)


def pixel_planes(write_noisy: bool) -> list[str]:
    """The uint8 planes of one tile in a format-2 ``pixels`` chunk: RGB, alpha, then the label variants."""
    return ["R", "G", "B", "alpha", "labels_exact", *(["labels_noisy"] if write_noisy else [])]


def pixel_arrays(group_path: Path) -> list[str]:
    """The pixel arrays (not ``meta``) a store at ``group_path`` holds, by its layout: ``pixels`` [+ ``extra``]
    (format 2) or ``images``, ``alpha``, labels [+ ``extra``] (format 1)."""
    if (group_path / PIXELS / "zarr.json").is_file():
        names = [PIXELS]
    else:
        names = [n for n in V1_ARRAYS if (group_path / n / "zarr.json").is_file()]
    return names + ([EXTRA] if (group_path / EXTRA / "zarr.json").is_file() else [])


def has_chunk_checksums(array_dir: Path) -> bool:
    """Whether the array at ``array_dir`` stores a CRC-32C with each chunk (stores written before
    checksums were added do not; they still read, without the check)."""
    try:
        codecs = json.loads((array_dir / "zarr.json").read_text())["codecs"]
    except (OSError, ValueError, KeyError):
        return False
    names = [c.get("name") for c in codecs]
    if names and names[0] == "sharding_indexed":
        names = [c.get("name") for c in codecs[0].get("configuration", {}).get("codecs", [])]
    return "crc32c" in names


def read_rows(array: Any, start: int, stop: int, where: str) -> np.ndarray:
    """``array[start:stop]`` as NumPy; a checksum or codec failure becomes a TileStoreError naming ``where``
    and the tile range (a corrupt shard never decodes to wrong pixels silently)."""
    try:
        return np.asarray(array[start:stop])
    except Exception as err:
        raise TileStoreError(
            f"{where}, tiles {start}..{stop - 1}: cannot decode ({type(err).__name__}: {err}); "
            "the store is corrupt: regenerate it"
        ) from err


def zarr_array(group: zarr.Group, name: str) -> zarr.Array:
    """The array `name` of `group` (zarr types a member as array or group; a group here is a corrupt store)."""
    import zarr

    node = group[name]
    if not isinstance(node, zarr.Array):
        raise TileStoreError(f"{group.store_path}: {name!r} is a {type(node).__name__}, not an array")
    return node


def zarr_group(group: zarr.Group, name: str) -> zarr.Group:
    """The subgroup `name` of `group` (an array there is a corrupt store)."""
    import zarr

    node = group[name]
    if not isinstance(node, zarr.Group):
        raise TileStoreError(f"{group.store_path}: {name!r} is a {type(node).__name__}, not a group")
    return node


def read_array(group: zarr.Group, name: str) -> np.ndarray:
    """All of the array `name` of `group` in memory (`array[:]`, typed as the NumPy array it is); a corrupt
    chunk (checksum mismatch) is a TileStoreError naming the array."""
    arr = zarr_array(group, name)
    try:
        return np.asarray(arr[:])
    except Exception as err:
        raise TileStoreError(
            f"{group.store_path}/{name}: cannot decode ({type(err).__name__}: {err}); the store is corrupt: "
            "regenerate it"
        ) from err


def read_planes(path: Path) -> list[str]:
    """The plane names of a format-2 store's ``pixels`` array (its zarr attribute ``planes``)."""
    try:
        planes = json.loads((path / PIXELS / "zarr.json").read_text())["attributes"]["planes"]
    except (OSError, ValueError, KeyError) as err:
        raise TileStoreError(
            f"tile store {path}: {PIXELS}/zarr.json is missing or names no planes ({type(err).__name__}: {err}); "
            "the store is corrupt: regenerate it"
        ) from None
    if [str(p) for p in planes[:5]] != pixel_planes(False):
        raise TileStoreError(f"tile store {path}: {PIXELS} planes {planes}; expected {pixel_planes(True)}")
    return [str(p) for p in planes]


def read_store_attrs(path: Path) -> StoreAttrs:
    """The published store's attributes, typed as recorded (:meth:`StoreAttrs.as_recorded`), or a clear error if it
    is missing, unpublished, of a later format or not an attribute document this rtscore reads."""
    meta = path / "zarr.json"
    if not meta.is_file():
        partial = path.with_name(f".{path.name}.partial")
        hint = f" (an interrupted generation is staged at {partial}; re-run to resume)" if partial.exists() else ""
        raise TileStoreError(f"tile store not found: {path}{hint}")
    try:
        attrs = json.loads(meta.read_text()).get("attributes", {})
    except ValueError as err:
        raise TileStoreError(f"tile store {path}: zarr.json is not valid JSON ({err})") from None
    store = attrs.get(ATTRS_KEY)
    if not store or store.get("format") != FORMAT:
        raise TileStoreError(f"{path} is not a published rts tile store (no '{ATTRS_KEY}' attributes)")
    if int(store.get("format_version", 0)) > FORMAT_VERSION:
        raise TileStoreError(
            f"tile store {path} has format_version {store['format_version']}; this rtscore reads up to {FORMAT_VERSION}"
        )
    try:
        return StoreAttrs.as_recorded(store)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(document)'}: {e['msg']}" for e in err.errors())
        raise TileStoreError(
            f"tile store {path}: its '{ATTRS_KEY}' attributes are not a store document this rtscore reads "
            f"({problems}); regenerate the store"
        ) from None
