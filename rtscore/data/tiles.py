"""In-memory tile records shared by every source (synthetic, GeoTIFF, legacy npz) and the store."""

from __future__ import annotations

import dataclasses
import math
import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rtscore.config.binding import PIXEL_SIZE_M
from rtscore.data.inventory.object_pixels import rotated_object_pixels

IGNORE_INDEX = 255
LABEL_VALUES = (0, 1, IGNORE_INDEX)
TileKind = Literal["positive", "negative", "full_nodata"]
KIND_CODES: dict[str, int] = {"negative": 0, "positive": 1, "full_nodata": 2}


def nominal_pixel_area_m2(scale: float = 1.0) -> float:
    """Ground area of a pixel of a source without georeferencing (synthetic scenes, legacy npz batches): the
    renderer draws RTS at ``PIXEL_SIZE_M`` ground metres per pixel at 1x, so ``(4.77 / scale)^2`` m²."""
    return (PIXEL_SIZE_M / scale) ** 2


@dataclass(frozen=True)
class ClassPixelCounts:
    """Labelled pixels per class over a set of tiles (ignore and NoData pixels excluded)."""

    background: int
    rts: int


@dataclass(frozen=True)
class TilePlan:
    """What one source tile will be, fixed before any pixel is rendered (so workers agree)."""

    index: int
    tile_id: str
    region: str
    kind: TileKind
    seed: int

    def rng(self) -> np.random.Generator:
        """The tile's own generator: a function of (seed, index, tile id) only, so any process agrees.

        The tile id names the split, so splits generated with the same seed never share scenes.
        """
        return np.random.default_rng([self.seed, self.index, zlib.crc32(self.tile_id.encode("utf-8"))])


@dataclass(frozen=True)
class TileInventory:
    """What a tile's inventory says of it (a GeoTIFF root's metadata.csv, docs/store-format.md#inventory-identity):
    the ``;``-joined ids of its RTS (``UIDs``) and of the mapped Negative (background) polygons with a pixel in it
    (``NegativeUIDs``), the ``;``-joined ``<uid>@<row>,<col>`` pixels naming each RTS's label-1 area
    (``ObjectPixels``, :mod:`rtscore.data.inventory.object_pixels`), and the latitude of its centre (°N; NaN:
    unknown). The texts are stored as read; empty where the root has no such column."""

    uids: str = ""
    negative_uids: str = ""
    object_pixels: str = ""
    latitude: float = math.nan


@dataclass
class RawTile:
    """One tile as stored: uint8 RGB, alpha, labels in {0, 1, 255}, optional float32 extra bands, and the ground
    area of one of its pixels (m²): from the tile's transform for GeoTIFF tiles, nominal for synthetic ones."""

    tile_id: str
    region: str
    rgb: np.ndarray  # (3, H, W) uint8
    alpha: np.ndarray  # (H, W) uint8, 0 = NoData, 255 = valid
    label_exact: np.ndarray  # (H, W) uint8 in {0, 1, 255}
    label_noisy: np.ndarray | None = None  # (H, W) uint8 in {0, 1, 255}
    extra: np.ndarray | None = None  # (E, H, W) float32
    n_objects: int = 0  # complete RTS (label 1) in the tile
    source_index: int = -1
    rotation: int = 0  # k of np.rot90 applied at generation
    meta: dict[str, float] = field(default_factory=dict)
    pixel_area_m2: float = field(kw_only=True)
    # (minx, miny, maxx, maxy) of the tile in its CRS (GeoTIFF tiles); None: no geography (synthetic, legacy npz)
    bounds: tuple[float, float, float, float] | None = field(default=None, kw_only=True)
    # the inventory's ids and latitude of the tile (GeoTIFF tiles); None: no inventory (synthetic, legacy npz)
    inventory: TileInventory | None = field(default=None, kw_only=True)

    @property
    def size(self) -> int:
        return int(self.rgb.shape[-1])

    def rotated(self, k: int) -> RawTile:
        """The tile rotated by k x 90 degrees (offline 4-way expansion)."""
        if k % 4 == 0:
            return self

        def rot(a: np.ndarray) -> np.ndarray:
            return np.ascontiguousarray(np.rot90(a, k, axes=(-2, -1)))

        def rot_optional(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else rot(a)

        return RawTile(
            tile_id=f"{self.tile_id}_r{90 * (k % 4)}",
            region=self.region,
            rgb=rot(self.rgb),
            alpha=rot(self.alpha),
            label_exact=rot(self.label_exact),
            label_noisy=rot_optional(self.label_noisy),
            extra=rot_optional(self.extra),
            n_objects=self.n_objects,
            source_index=self.source_index,
            rotation=k % 4,
            meta=dict(self.meta),
            pixel_area_m2=self.pixel_area_m2,
            bounds=self.bounds,  # a rotated tile covers the same ground
            inventory=self._rotated_inventory(k),
        )

    def _rotated_inventory(self, k: int) -> TileInventory | None:
        """The inventory of the tile rotated by ``k`` quarter turns: the same ids, its object pixels turned."""
        if self.inventory is None or not self.inventory.object_pixels:
            return self.inventory
        turned = rotated_object_pixels(self.inventory.object_pixels, k, self.size)
        return dataclasses.replace(self.inventory, object_pixels=turned)


def with_nodata_cleared(tile: RawTile) -> RawTile:
    """The tile as a store holds it (docs/store-format.md): where alpha is 0 (NoData, after every NoData rule of
    its source), RGB and EXTRA hold 0 and every label variant 255. The same tile when it holds that already."""
    nodata = tile.alpha == 0
    if not nodata.any():
        return tile

    def cleared(a: np.ndarray, value: float) -> np.ndarray:
        mask = np.broadcast_to(nodata, a.shape)
        return np.where(mask, np.asarray(value, a.dtype), a) if (a[mask] != value).any() else a

    return dataclasses.replace(
        tile,
        rgb=cleared(tile.rgb, 0),
        extra=None if tile.extra is None else cleared(tile.extra, 0.0),
        label_exact=cleared(tile.label_exact, IGNORE_INDEX),
        label_noisy=None if tile.label_noisy is None else cleared(tile.label_noisy, IGNORE_INDEX),
    )


def pixel_kind(alpha: np.ndarray, label: np.ndarray) -> TileKind:
    """A tile's kind from its stored pixels: full NoData without a valid pixel, positive with a label-1 pixel
    (valid: NoData pixels hold 255), else negative. The three are a partition of the tiles."""
    valid = alpha > 0
    if not valid.any():
        return "full_nodata"
    return "positive" if ((label == 1) & valid).any() else "negative"


def nodata_breaches(rgb: np.ndarray, extra: np.ndarray | None, alpha: np.ndarray, label: np.ndarray) -> int:
    """NoData pixels (alpha 0) of a stored tile that break the store's convention (RGB 0, EXTRA 0, label 255):
    0 for a tile as :func:`with_nodata_cleared` leaves it."""
    nodata = alpha == 0
    if not nodata.any():
        return 0
    bad = (rgb != 0).any(axis=0) | (label != IGNORE_INDEX)
    if extra is not None and extra.size:
        bad |= (extra != 0).any(axis=0)  # NaN != 0 too
    return int((bad & nodata).sum())


@dataclass
class StoredSample:
    """What every tile source returns from ``__getitem__``: one tile with the selected label variant."""

    index: int
    tile_id: str
    region: str
    rgb: np.ndarray  # (3, H, W) uint8
    alpha: np.ndarray  # (H, W) uint8, 0 = NoData
    label: np.ndarray  # (H, W) uint8 in {0, 1, 255}
    extra: np.ndarray | None = None  # (E, H, W) float32
    pixel_area_m2: float = field(kw_only=True)  # ground m² of one pixel (object areas, size bins, large RTS)
