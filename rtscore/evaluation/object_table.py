"""``evaluation/test_objects.csv``: one row per ground-truth object of the test tiles (a connected component of
label 1, as the object metrics match it), named by the inventory ids whose ``ObjectPixels`` pixel it holds, with
whether each seed found it (matched at IoU 0.3, else the first threshold). Identity end to end: an ARTS UID of
metadata.csv rides through the store's per-tile metadata into this table."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np

from rtscore.data.inventory.object_pixels import join_ids
from rtscore.evaluation.evaluate import EvaluationError, SeedEvaluation, report_iou
from rtscore.evaluation.groups import TestTiles

COLUMNS = ("tile_id", "region", "latitude", "uids", "area_m2")  # then found_seed_<s> per seed, found_seeds


@dataclass
class ObjectTable:
    """The test tiles' GT objects (from the first seed's pass: every seed sees the same labels) and, per seed,
    which of them it found."""

    tile_id: list[str]
    region: list[str]
    latitude: list[float]
    uids: list[str]
    area_m2: np.ndarray
    tile_index: np.ndarray  # (G,) each object's tile, in the pass's tile order
    tile_order: list[str]  # the pass's tiles
    found: dict[int, np.ndarray] = field(default_factory=dict)  # seed -> (G,) matched at the report's IoU

    @classmethod
    def of(cls, ev: SeedEvaluation, tiles: TestTiles) -> ObjectTable:
        """The GT objects of a seed's pass, each named by the ids whose object pixel lies in it."""
        area, _ = ev.objects.gt_objects_m2()
        tile_index = ev.objects.gt_tile_index()
        in_tile = np.arange(tile_index.size) - np.searchsorted(tile_index, tile_index)  # k-th object of its tile
        names: dict[tuple[int, int], list[str]] = {}
        for t, tid in enumerate(ev.tile_ids):
            for uid, k in zip(tiles.object_uids.get(tid, []), ev.point_gt.get(tid, []), strict=True):
                if k >= 0:
                    names.setdefault((t, int(k)), []).append(uid)
        ids = [ev.tile_ids[t] for t in tile_index]
        lat = tiles.latitude or {}
        return cls(
            tile_id=ids,
            region=[tiles.region[t] for t in ids],
            latitude=[lat.get(t, math.nan) for t in ids],
            uids=[join_ids(names.get((int(t), int(k)), [])) for t, k in zip(tile_index, in_tile, strict=True)],
            area_m2=area,
            tile_index=tile_index,
            tile_order=list(ev.tile_ids),
        )

    def add_seed(self, seed: int, ev: SeedEvaluation) -> None:
        """Which objects ``seed`` found (its pass must hold the same objects, tile by tile)."""
        counter = ev.objects
        tile_index = counter.gt_tile_index()
        if ev.tile_ids != self.tile_order or not np.array_equal(tile_index, self.tile_index):
            raise EvaluationError(f"seed {seed}'s test pass holds other ground-truth objects than the first seed's")
        _, matched = counter.gt_objects()
        self.found[seed] = matched[counter.iou_thresholds.index(report_iou(counter.iou_thresholds))].copy()

    def csv_text(self) -> str:
        """The table as CSV: the columns of :data:`COLUMNS`, ``found_seed_<s>`` (1 found, 0 not) per seed, and
        ``found_seeds`` (``k of n``)."""
        seeds = list(self.found)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow([*COLUMNS, *(f"found_seed_{s}" for s in seeds), "found_seeds"])
        for g, tid in enumerate(self.tile_id):
            hits = [int(self.found[s][g]) for s in seeds]
            lat = self.latitude[g]
            writer.writerow(
                [
                    tid,
                    self.region[g],
                    "" if math.isnan(lat) else f"{lat:.5f}",
                    self.uids[g],
                    f"{float(self.area_m2[g]):.1f}",
                    *hits,
                    f"{sum(hits)} of {len(seeds)}",
                ]
            )
        return out.getvalue()
