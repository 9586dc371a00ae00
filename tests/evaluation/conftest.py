"""A test split of two regions at two latitudes, built in code, and two seeds' test passes over it (a model that
returns its input's first band as logits): the per-region, per-band and per-object results are checked on it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from rtscore.config import PipelineConfig, parse_pipeline_config
from rtscore.data.store.reader import TileMetadata
from rtscore.evaluation import SeedEvaluation, run_test_pass, summarize_seed
from rtscore.evaluation.groups import TestTiles
from tests.helpers import calibrated_deployment, tiny_pipeline_config

SIZE = 16
PIXEL_AREA_M2 = 9.0  # 3 m pixels
SQUARE = (slice(2, 6), slice(2, 6))  # an RTS: 16 px, 144 m²
SECOND = (slice(10, 13), slice(9, 14))  # another: 15 px, 135 m²


@dataclass(frozen=True)
class TestTile:
    """One tile: its region, latitude, objects (squares of label 1), object pixels and what each seed misses."""

    __test__ = False

    tile_id: str
    region: str
    latitude: float
    objects: tuple[tuple[slice, slice], ...] = ()
    object_pixels: str = ""
    missed_by: tuple[int, ...] = ()  # seeds that predict nothing on it


# Region "north slope" at 62 °N: 6 positive tiles (7 objects), 2 negative; "yamal" at 70 °N: 2 positive, 2
# negative (under the floor of 5 positive tiles), and one positive tile of it at 75 °N, outside every band.
TILES = (
    TestTile("a0", "north slope", 62.0, (SQUARE, SECOND), "u-a0-1@3,3;u-a0-2@11,10"),
    TestTile("a1", "north slope", 62.0, (SQUARE,), "u-a1-1@2,2;u-a1-2@5,5"),  # two ids, one object (merged RTS)
    TestTile("a2", "north slope", 62.0, (SQUARE,)),  # an object no id names
    TestTile("a3", "north slope", 62.0, (SQUARE,), "u-a3@4,4"),
    TestTile("a4", "north slope", 62.0, (SQUARE,), "u-a4@4,4"),
    TestTile("a5", "north slope", 62.0, (SQUARE,), "u-a5@4,4", missed_by=(2,)),
    TestTile("a6", "north slope", 62.0),
    TestTile("a7", "north slope", 62.0),
    TestTile("b0", "yamal", 70.0, (SQUARE,), "u-b0@3,3"),
    TestTile("b1", "yamal", 70.0, (SQUARE,), "u-b1@3,3", missed_by=(1, 2)),
    TestTile("b2", "yamal", 70.0),
    TestTile("b3", "yamal", 70.0),
    TestTile("b4", "yamal", 75.0, (SQUARE,), "u-b4@3,3"),
)
SEEDS = (1, 2)


def label_of(tile: TestTile) -> np.ndarray:
    label = np.zeros((SIZE, SIZE), np.uint8)
    for sl in tile.objects:
        label[sl] = 1
    return label


def logits_of(tile: TestTile, seed: int) -> np.ndarray:
    """+6 on the tile's objects unless the seed misses it, -6 elsewhere, and a false positive on a7 for seed 2."""
    z = np.full((SIZE, SIZE), -6.0, np.float32)
    if seed not in tile.missed_by:
        z[label_of(tile) == 1] = 6.0
    if tile.tile_id == "a7" and seed == 2:
        z[8:11, 8:11] = 6.0
    return z


def loader(tiles: tuple[TestTile, ...], seed: int) -> list[dict[str, Any]]:
    """The batches a test loader gives (4 tiles each): the logits as the image's first band."""
    import torch

    batches = []
    for i in range(0, len(tiles), 4):
        part = tiles[i : i + 4]
        image = np.zeros((len(part), 3, SIZE, SIZE), np.float32)
        image[:, 0] = [logits_of(t, seed) for t in part]
        batches.append(
            {
                "image": torch.from_numpy(image),
                "label": torch.from_numpy(np.stack([label_of(t) for t in part])),
                "tile_id": [t.tile_id for t in part],
                "pixel_area_m2": torch.full((len(part),), PIXEL_AREA_M2, dtype=torch.float64),
            }
        )
    return batches


def metadata(tiles: tuple[TestTile, ...], *, latitudes: bool = True) -> TileMetadata:
    """The store's per-tile metadata of ``tiles`` (with latitudes and object pixels, or without latitudes)."""
    n = len(tiles)
    positive = np.array([bool(t.objects) for t in tiles])
    return TileMetadata(
        tile_id=np.array([t.tile_id for t in tiles], object),
        region=np.array([t.region for t in tiles], object),
        kind=positive.astype(np.uint8),
        is_positive=positive,
        n_positive_px=np.array([int(label_of(t).sum()) for t in tiles], np.int32),
        n_ignore_px=np.zeros(n, np.int32),
        n_nodata_px=np.zeros(n, np.int32),
        pixel_area_m2=np.full(n, PIXEL_AREA_M2),
        tile_size=SIZE,
        uids=np.array([";".join(p.split("@")[0] for p in t.object_pixels.split(";") if p) for t in tiles], object),
        negative_uids=np.array([""] * n, object),
        object_pixels=np.array([t.object_pixels for t in tiles], object),
        latitude=np.array([t.latitude for t in tiles]) if latitudes else None,
    )


def first_channel_model() -> Any:
    import torch

    class FirstChannel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gain = torch.nn.Parameter(torch.ones(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x[:, :1] * self.gain

    return FirstChannel()


@dataclass(frozen=True)
class Passes:
    """The config, the test tiles' facts and each seed's test pass over :data:`TILES`."""

    cfg: PipelineConfig
    tiles: TestTiles
    evs: dict[int, SeedEvaluation]


def seed_pass(cfg: PipelineConfig, tiles: TestTiles | None, batches: list[dict[str, Any]]) -> SeedEvaluation:
    dep = calibrated_deployment(precision="fp32", tta="none")
    return summarize_seed(run_test_pass(first_channel_model(), batches, cfg, dep, tiles=tiles), cfg)


def two_region_passes() -> Passes:
    """Both seeds' passes over :data:`TILES`, under the default evaluation settings."""
    cfg = parse_pipeline_config(tiny_pipeline_config())
    assert cfg.evaluation.latitude_bands == [60.0, 64.0, 68.0, 72.0, 74.0]
    assert cfg.evaluation.min_group_positive_tiles == 5 and 0.3 in cfg.metrics.object_iou_thresholds
    tiles = TestTiles.of(metadata(TILES))
    return Passes(cfg, tiles, {s: seed_pass(cfg, tiles, loader(TILES, s)) for s in SEEDS})


@pytest.fixture(scope="session")
def passes() -> Passes:
    return two_region_passes()
