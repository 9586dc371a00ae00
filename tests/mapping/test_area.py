"""The ground a campaign mapped: the union of scene footprints in an equal-area projection (rtscore.mapping.area),
from real mask and probability GeoTIFFs in UTM."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import rasterio
from rasterio.warp import Resampling, calculate_default_transform, reproject

from rtscore.mapping.area import union_ground_m2
from rtscore.mapping.polygons import SceneParts, scene_parts

SIZE, PIXEL = 128, 30.0
UTM33 = "EPSG:32633"  # central meridian 15° E
CENTRAL = rasterio.Affine(PIXEL, 0.0, 500_000.0, 0.0, -PIXEL, 6_660_000.0)  # ~60° N, on the central meridian
K0 = 0.9996  # UTM's scale on its central meridian


def write_scene(d: Path, name: str, mask: np.ndarray, crs: str, transform: rasterio.Affine) -> SceneParts:
    """Mask (uint8, NoData 255) and probability (float32, NoData -1) GeoTIFFs as rts predict writes them; their
    parts."""
    d.mkdir(parents=True, exist_ok=True)
    prob = np.where(mask == 255, -1.0, 0.2).astype(np.float32)
    for path, data, dtype, nodata in (
        (d / f"{name}_mask.tif", mask, "uint8", 255),
        (d / f"{name}_prob.tif", prob, "float32", -1.0),
    ):
        with rasterio.open(
            path,
            "w",
            driver="GTiff",
            width=data.shape[1],
            height=data.shape[0],
            count=1,
            dtype=dtype,
            crs=crs,
            transform=transform,
            nodata=nodata,
        ) as dst:
            dst.write(data.astype(dtype), 1)
    return scene_parts(d / f"{name}_mask.tif", d / f"{name}_prob.tif", name)


def test_one_scene_s_ground_is_its_ellipsoidal_area(tmp_path: Path) -> None:
    """On UTM's central meridian a projected m² is K0² ground m²: the union's area is the ground's, not the grid's."""
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[:, :20] = 255  # NoData strip: not mapped
    sc = write_scene(tmp_path, "a", mask, UTM33, CENTRAL)
    want = SIZE * (SIZE - 20) * PIXEL**2 / K0**2
    assert union_ground_m2([sc]) == pytest.approx(want, rel=1e-5)
    assert union_ground_m2([]) == 0.0


def test_the_same_ground_in_two_crss_counts_once(tmp_path: Path) -> None:
    """A scene and the same ground warped into the next UTM zone: their union is the ground once (to the pixels the
    warp adds at the edges), their sum twice; a scene beside them adds its own area."""
    mask = np.zeros((SIZE, SIZE), np.uint8)
    a = write_scene(tmp_path, "a", mask, UTM33, CENTRAL)
    dst_crs = "EPSG:32632"
    transform, w, h = calculate_default_transform(
        UTM33, dst_crs, SIZE, SIZE, *rasterio.transform.array_bounds(SIZE, SIZE, CENTRAL), resolution=PIXEL
    )
    warped = np.full((h, w), 255, np.uint8)
    reproject(
        mask,
        warped,
        src_transform=CENTRAL,
        src_crs=UTM33,
        dst_transform=transform,
        dst_crs=dst_crs,
        resampling=Resampling.nearest,
        src_nodata=255,
        dst_nodata=255,
    )
    b = write_scene(tmp_path, "b", warped, dst_crs, transform)
    one = union_ground_m2([a])
    assert union_ground_m2([b]) == pytest.approx(one, rel=0.03)  # the same ground, resampled
    both = union_ground_m2([a, b])
    assert one <= both < 1.03 * one  # counted once, not twice
    beside = write_scene(tmp_path, "c", mask, UTM33, CENTRAL @ rasterio.Affine.translation(SIZE + 10, 0))
    assert union_ground_m2([a, b, beside]) == pytest.approx(both + one, rel=1e-4)


def test_block_areas_from_the_cache_give_the_area_computed_from_scratch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks smaller than a scene: a scene spans several, each block's area is cached with the footprints it was
    computed from, and a finish after a scene is added, re-mapped or dropped gives the figure computed afresh (to the
    last bit) from the blocks it changed only."""
    from rtscore.mapping import area, merge_store

    monkeypatch.setattr(merge_store, "BLOCK_M", 1500.0)  # a 3,840 m scene spans 3 x 3 blocks or more
    mask = np.zeros((SIZE, SIZE), np.uint8)
    mask[:30, :30] = 255
    scenes = [
        write_scene(tmp_path / str(k), f"s{k}", mask, UTM33, CENTRAL @ rasterio.Affine.translation(k * 100, k * 40))
        for k in range(3)
    ]
    cache = tmp_path / "area-blocks.json"
    computed: list[tuple[int, int]] = []
    real = area._block_m2

    def counting(block, *a, **kw):  # type: ignore[no-untyped-def]
        computed.append(block)
        return real(block, *a, **kw)

    monkeypatch.setattr(area, "_block_m2", counting)
    for done in ([scenes[0]], scenes[:2], scenes, [scenes[0], scenes[2]]):
        computed.clear()
        fresh = union_ground_m2(done)
        n_all = len(computed)
        computed.clear()
        cached = union_ground_m2(done, cache)
        assert cached == fresh
        assert len(computed) < n_all or done == [scenes[0]]  # only the blocks whose footprints changed
    computed.clear()
    assert union_ground_m2([scenes[0], scenes[2]], cache) == fresh and computed == []  # nothing changed
    one = union_ground_m2([scenes[0]])
    assert one == pytest.approx(SIZE * SIZE * PIXEL**2 * (1 - (30 / SIZE) ** 2) / K0**2, rel=1e-5)
    cache.write_text("{torn")
    assert union_ground_m2([scenes[0], scenes[2]], cache) == fresh  # an unreadable cache: every block again
