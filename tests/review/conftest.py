"""A small review directory built in code: review.json, 25 objects in manifest.jsonl, and their chips (RGBA PNGs with
a NoData corner, and SVG overlays), as `rts review export` lays them out (rtscore.review.manifest)."""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rtscore.review.manifest import (
    CHIPS_DIR,
    HEADER_FILE,
    MANIFEST_FILE,
    CampaignRef,
    ChipSettings,
    ReviewHeader,
    ReviewObject,
    Selection,
    object_line,
    review_id,
)

N_OBJECTS = 25


def png_rgba(rgba: np.ndarray) -> bytes:
    """An 8-bit RGBA PNG of an (H, W, 4) uint8 array (zlib, no filter)."""
    h, w, _ = rgba.shape

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    raw = b"".join(b"\x00" + rgba[y].tobytes() for y in range(h))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 6, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b"")


def _chip(oid: int, w: int, h: int, ring: list[list[float]], nodata: bool) -> np.ndarray:
    """Tundra-ish noise with a brighter scar inside the outline; a NoData (alpha 0) corner when ``nodata``."""
    rng = np.random.default_rng(oid)
    rgba = np.empty((h, w, 4), np.uint8)
    base = np.array([92, 104, 70]) + rng.integers(-12, 12, (h, w, 3))
    yy, xx = np.mgrid[0:h, 0:w] + 0.5
    cx = sum(p[0] for p in ring[:-1]) / (len(ring) - 1)
    cy = sum(p[1] for p in ring[:-1]) / (len(ring) - 1)
    r = max(abs(p[0] - cx) for p in ring)
    inside = (xx - cx) ** 2 + (yy - cy) ** 2 < r**2
    base[inside] = np.array([150, 132, 110]) + rng.integers(-15, 15, (int(inside.sum()), 3))
    rgba[..., :3] = np.clip(base, 0, 255)
    rgba[..., 3] = 255
    if nodata:
        rgba[: h // 4, : w // 3] = 0  # NoData as the export writes it: alpha 0
    return rgba


def _outline(w: int, h: int, k: int) -> list[list[float]]:
    """An octagon around the chip's centre, a third of its size (closed ring, chip pixel coordinates)."""
    cx, cy, r = w / 2, h / 2, min(w, h) / 3
    pts = [
        [round(cx + r * math.cos(2 * math.pi * i / 8 + k), 2), round(cy + r * math.sin(2 * math.pi * i / 8 + k), 2)]
        for i in range(8)
    ]
    return [*pts, pts[0]]


def write_review(
    root: Path, *, objects_sha256: str = "a" * 64, n: int = N_OBJECTS
) -> tuple[ReviewHeader, list[ReviewObject]]:
    """Write a review directory under ``root``; another ``objects_sha256`` gives another review id."""
    (root / CHIPS_DIR).mkdir(parents=True, exist_ok=True)
    campaign = CampaignRef(
        uri="gs://rts-maps/campaign-2026", objects_sha256=objects_sha256, package_sha256="b" * 64, crs_wkt="EPSG:32652"
    )
    selection = Selection(mode="all")
    ids = [3 * i + 2 for i in range(n)]
    objects: list[ReviewObject] = []
    for k, oid in enumerate(ids):
        w, h = 64 + 8 * (k % 4), 64 + 8 * (k % 3)
        ring = _outline(w, h, k)
        png = png_rgba(_chip(oid, w, h, ring, nodata=k % 5 == 0))
        (root / CHIPS_DIR / f"{oid}.png").write_bytes(png)
        (root / CHIPS_DIR / f"{oid}.svg").write_text(
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}"><image href="{oid}.png"/></svg>\n'
        )
        lon, lat = 130.0 + 0.01 * k, 68.0 + 0.005 * k
        d = 0.001
        geometry = {
            "type": "Polygon",
            "coordinates": [[[lon, lat], [lon + d, lat], [lon + d, lat + d], [lon, lat + d], [lon, lat]]],
        }
        objects.append(
            ReviewObject(
                object_id=oid,
                scene_id=f"scene-{k % 3}",
                scene_uri=f"gs://rts-scenes/scene-{k % 3}.tif",
                region=None if k % 7 == 6 else f"r{k % 4}",
                split=None if k % 7 == 6 else ("train", "val", "test", "train")[k % 4],
                inventory_uids=[f"inv-{oid}"] if k % 2 else [],
                prob_mean=round(0.3 + 0.025 * k, 3),
                prob_max=round(min(1.0, 0.5 + 0.02 * k), 3),
                ground_area_m2=1500.0 + 700.0 * k,
                size_bin=("small", "medium", "large")[k % 3],
                partial=k % 6 == 5,
                geometry=geometry,
                geometry_wkt=f"POLYGON (({k} 0, {k + 1} 0, {k + 1} 1, {k} 1, {k} 0))",
                chip=f"{CHIPS_DIR}/{oid}.png",
                overlay=f"{CHIPS_DIR}/{oid}.svg",
                chip_window=(100 * k, 50 * k, w, h),
                chip_outline=[ring],
                pixel_ground_m=3.0,
                chip_sha256=hashlib.sha256(png).hexdigest(),
            )
        )
    header = ReviewHeader(
        review_id=review_id(campaign, selection, ids),
        campaign=campaign,
        selection=selection,
        chips=ChipSettings(),
        n_objects=n,
        code_sha256="c" * 64,
    )
    (root / HEADER_FILE).write_text(header.model_dump_json(indent=2) + "\n")
    (root / MANIFEST_FILE).write_text("".join(object_line(o) + "\n" for o in objects))
    return header, objects


@pytest.fixture
def make_review(tmp_path: Path) -> Callable[..., tuple[Path, ReviewHeader, list[ReviewObject]]]:
    """``make_review(name, **kw)``: a review directory ``tmp_path/name`` (write_review's keywords)."""

    def make(name: str = "review-1", **kw: object) -> tuple[Path, ReviewHeader, list[ReviewObject]]:
        root = tmp_path / name
        header, objects = write_review(root, **kw)  # type: ignore[arg-type]
        return root, header, objects

    return make


def tile_files(root: Path) -> dict[str, bytes]:
    """Every tile file of a data root (PLANET-RGB, EXTRA, labels), keyed ``<kind>/<tile id>.tif``."""
    kinds = ("PLANET-RGB", "EXTRA", "labels")
    return {f"{d}/{f.name}": f.read_bytes() for d in kinds if (root / d).is_dir() for f in sorted((root / d).iterdir())}


def tile_splits(root: Path) -> dict[str, str]:
    """Each tile of a data root and its split (its RegionName's in splits.yaml)."""
    import csv

    import yaml

    split_of = {r: s for s, regions in yaml.safe_load((root / "splits.yaml").read_text()).items() for r in regions}
    with (root / "metadata.csv").open(newline="") as fh:
        return {r["Tile_id"]: split_of[r["RegionName"]] for r in csv.DictReader(fh)}


def assert_only_cells_differ(parent: Path, out: Path, cells: set[str]) -> None:
    """Issue 38: every tile of ``parent`` is in ``out`` byte for byte (image, EXTRA, labels) and in the same split,
    but the tiles of ``cells`` (those holding a judged object); every tile ``out`` adds is one of ``cells``; the test
    split is the same tiles, unchanged."""
    before, after = tile_files(parent), tile_files(out)
    changed = {Path(k).stem for k, data in before.items() if after.get(k) != data}
    assert changed <= cells, f"parent tiles changed away from the judged objects: {sorted(changed - cells)}"
    added = {Path(k).stem for k in set(after) - set(before)}
    assert added <= cells, f"tiles added away from the judged objects: {sorted(added - cells)}"
    splits_before, splits_after = tile_splits(parent), tile_splits(out)
    assert {t: splits_after.get(t) for t in splits_before} == splits_before, "a parent tile changed split"
    test = {t for t, s in splits_before.items() if s == "test"}
    assert test and {t for t, s in splits_after.items() if s == "test"} == test, "the test split changed"
    assert all(after[k] == data for k, data in before.items() if Path(k).stem in test), "a test tile changed"


CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def require_chromium() -> None:
    """Skip where Playwright or Debian's Chromium is missing; under CI, fail saying which."""
    why = None
    if importlib.util.find_spec("playwright") is None:
        why = "playwright is not installed (pip install playwright==1.65.2; no `playwright install` needed)"
    elif not Path(CHROMIUM).exists():
        why = f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"the review page's browser test cannot run under CI: {why}")
        pytest.skip(why)


@contextmanager
def launched_chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright's sync API. Keep it open no longer than needed: while it is,
    Playwright runs an asyncio loop on the main thread, and code calling ``asyncio.run`` there would fail."""
    from playwright.sync_api import sync_playwright

    require_chromium()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """The browser for one test module (never longer: :func:`launched_chromium`)."""
    require_chromium()
    with launched_chromium() as browser:
        yield browser
