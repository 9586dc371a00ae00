"""A PNG grid of sample tiles with label overlays: RTS red, ignore yellow, NoData blue."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.tiles import IGNORE_INDEX

CELL = 160
OVERLAYS = {"rts": (255, 40, 40), "ignore": (255, 220, 0), "nodata": (40, 90, 255)}


def overlay(rgb: np.ndarray, label: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """HWC uint8 image with translucent label colours (what an annotator would check)."""
    img = np.moveaxis(rgb, 0, -1).astype(np.float32)
    for mask, colour, weight in (
        (label == 1, OVERLAYS["rts"], 0.45),
        ((label == IGNORE_INDEX) & (alpha > 0), OVERLAYS["ignore"], 0.35),
        (alpha == 0, OVERLAYS["nodata"], 0.6),
    ):
        img[mask] = (1 - weight) * img[mask] + weight * np.array(colour, np.float32)
    return img.clip(0, 255).astype(np.uint8)


def _pick(store: ZarrTileStore, n_pos: int, n_neg: int) -> list[int]:
    meta = store.metadata
    pos = np.flatnonzero(meta.is_positive)
    neg = np.flatnonzero(~meta.is_positive & ~meta.full_nodata)
    nodata = np.flatnonzero(meta.n_nodata_px > 0)
    picks = [*pos[:n_pos].tolist(), *neg[:n_neg].tolist(), *nodata[:1].tolist()]
    return list(dict.fromkeys(picks))


def write_sample_grid(stores: Mapping[str, Path], cfg: PipelineConfig, path: Path, per_split: int = 6) -> Path:
    """Raw tile next to its overlay, a row per sample, grouped by split; written atomically."""
    from PIL import Image, ImageDraw

    rows: list[tuple[str, np.ndarray, np.ndarray]] = []
    for split, store_path in stores.items():
        store = ZarrTileStore(store_path, cfg.data.mask_type, [c.name for c in cfg.channels.extra])
        for i in _pick(store, per_split // 2 + 1, per_split // 2)[:per_split]:
            s = store[i]
            rows.append((f"{split} {s.tile_id}", np.moveaxis(s.rgb, 0, -1), overlay(s.rgb, s.label, s.alpha)))
    cols = 4
    n_cells = max(len(rows), 1)
    grid_rows = -(-n_cells // (cols // 2))
    canvas = Image.new("RGB", (cols * CELL, grid_rows * (CELL + 14)), (20, 20, 20))
    draw = ImageDraw.Draw(canvas)
    for k, (name, raw, over) in enumerate(rows):
        r, c = divmod(k, cols // 2)
        x, y = c * 2 * CELL, r * (CELL + 14)
        for j, arr in enumerate((raw, over)):
            canvas.paste(Image.fromarray(arr).resize((CELL, CELL), Image.Resampling.NEAREST), (x + j * CELL, y + 14))
        draw.text((x + 2, y + 1), name, fill=(230, 230, 230))
    tmp = path.with_name(f".{path.name}.tmp")
    canvas.save(tmp, format="PNG")
    tmp.replace(path)
    return path
