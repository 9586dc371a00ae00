"""The test report per region and per latitude band (guide §8.3, Phase 3): each group's figures from the per-tile
results a seed's test pass already holds, never a second model pass. A group's PR-AUC comes from its tiles' logit
histograms, negatives re-weighted to the first prevalence ratio within the group (as the overall metric does over
every tile); its object recall from its tiles' ground-truth objects, at IoU 0.3 (else the first threshold)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.inventory.object_pixels import parse_object_pixels
from rtscore.data.store.reader import TileMetadata
from rtscore.evaluation.evaluate import (
    GroupBy,
    GroupFigures,
    GroupResult,
    GroupTable,
    MetricSummary,
    SeedEvaluation,
    SeedTestResult,
    fmt,
    mean_std,
    report_iou,
)
from rtscore.metrics import pr_auc, ratio_tag

OUTSIDE_BANDS = "outside bands"
LATITUDE_UNKNOWN = "latitude unknown"
NO_LATITUDES = (
    "the test store records no tile latitudes (a synthetic store, or one ingested before they were recorded: "
    "regenerate it from its data root's metadata.csv): no per-band table"
)


@dataclass(frozen=True)
class TestTiles:
    """What the test store says of each tile, by tile id: its region, its latitude (None: the store records
    none) and its inventory's object pixels (``ObjectPixels``; none where the store records none)."""

    __test__ = False  # not a pytest class

    region: dict[str, str]
    latitude: dict[str, float] | None
    object_pixels: dict[str, np.ndarray]  # tile id -> (N, 2) rows and columns, in ObjectPixels order
    object_uids: dict[str, list[str]]  # tile id -> the N ids of those pixels

    @classmethod
    def of(cls, meta: TileMetadata) -> TestTiles:
        """The facts of a store's per-tile metadata (its ObjectPixels were checked when it was ingested)."""
        ids = [str(t) for t in meta.tile_id]
        latitude = None if meta.latitude is None else dict(zip(ids, meta.latitude.tolist(), strict=True))
        pixels: dict[str, np.ndarray] = {}
        uids: dict[str, list[str]] = {}
        texts = [""] * len(ids) if meta.object_pixels is None else [str(t) for t in meta.object_pixels]
        for tid, text in zip(ids, texts, strict=True):
            entries = parse_object_pixels(text)
            if entries:
                pixels[tid] = np.array([(p.row, p.col) for p in entries], np.int64)
                uids[tid] = [p.uid for p in entries]
        return cls(dict(zip(ids, (str(r) for r in meta.region), strict=True)), latitude, pixels, uids)

    def points(self, tile_id: str) -> np.ndarray | None:
        """The tile's object pixels as (N, 2) rows and columns; None when it has none."""
        return self.object_pixels.get(tile_id)


def band_name(lo: float, hi: float) -> str:
    """A latitude band's name: ``60-64 °N``."""
    return f"{lo:g}-{hi:g} °N"


def tile_groups(
    tile_ids: Sequence[str], tiles: TestTiles, bands: Sequence[float]
) -> dict[GroupBy, dict[str, np.ndarray]]:
    """The groups of ``tile_ids`` as boolean masks over them: every region (sorted), and, when the store records
    latitudes, every band of ``bands`` (each from its lower edge up to its upper, the last one's included), then
    the tiles outside every band and those without a latitude (each row only when it has a tile). No
    ``latitude`` key when the store records none."""
    regions = np.array([tiles.region[t] for t in tile_ids], object)
    out: dict[GroupBy, dict[str, np.ndarray]] = {"region": {r: regions == r for r in sorted(set(regions.tolist()))}}
    if tiles.latitude is None:
        return out
    lat = np.array([tiles.latitude[t] for t in tile_ids], np.float64)
    known = ~np.isnan(lat)
    by_band: dict[str, np.ndarray] = {}
    inside = np.zeros(lat.shape, bool)
    for i, (lo, hi) in enumerate(pairwise(bands)):
        last = i == len(bands) - 2
        mask = known & (lat >= lo) & ((lat <= hi) if last else (lat < hi))
        by_band[band_name(lo, hi)] = mask
        inside |= mask
    for name, mask in ((OUTSIDE_BANDS, known & ~inside), (LATITUDE_UNKNOWN, ~known)):
        if mask.any():
            by_band[name] = mask
    out["latitude"] = by_band
    return out


def seed_groups(ev: SeedEvaluation, tiles: TestTiles, cfg: PipelineConfig) -> list[GroupFigures]:
    """One seed's figures per region and latitude band, from its pass's per-tile histograms and objects: the
    PR-AUC at ``metrics.ratios[0]`` of the group's tiles (nan without a positive or a negative tile), the object
    recall at :func:`report_iou` of their GT objects (nan without one)."""
    if ev.hist.tile_ids != tuple(ev.tile_ids):
        raise ValueError("the seed's histograms and objects are not of the same tiles in the same order")
    ratio = cfg.metrics.ratios[0]
    counter = ev.objects
    _, matched = counter.gt_objects()
    found = matched[counter.iou_thresholds.index(report_iou(counter.iou_thresholds))]
    object_tile = counter.gt_tile_index()
    out = []
    for by, masks in tile_groups(ev.tile_ids, tiles, cfg.evaluation.latitude_bands).items():
        for name, mask in masks.items():
            n_pos = int((mask & ev.is_positive).sum())
            n_neg = int(mask.sum()) - n_pos
            hits = found[mask[object_tile]]
            out.append(
                GroupFigures(
                    by=by,
                    name=name,
                    n_tiles=int(mask.sum()),
                    n_positive_tiles=n_pos,
                    n_negative_tiles=n_neg,
                    n_objects=int(hits.size),
                    pr_auc=pr_auc(ev.hist.subset(mask), ratio) if n_pos and n_neg else math.nan,
                    object_recall=float(hits.mean()) if hits.size else math.nan,
                )
            )
    return out


def group_tables(
    per_seed: Sequence[SeedTestResult], cfg: PipelineConfig, *, has_latitudes: bool
) -> tuple[GroupTable, GroupTable]:
    """The per-region and per-band tables over seeds: each group's counts (the same test tiles for every seed),
    its PR-AUC and object recall as mean ± std over seeds where it is measured, else why not. ``has_latitudes``
    False: the band table has no rows, and says the store records no latitudes."""
    common = {
        "ratio": ratio_tag(cfg.metrics.ratios[0]),
        "iou": report_iou(cfg.metrics.object_iou_thresholds),
        "min_positive_tiles": cfg.evaluation.min_group_positive_tiles,
    }
    tables = []
    for by in ("region", "latitude"):
        first = [g for g in per_seed[0].groups if g.by == by]
        rows = [_group_result(g, [_same_group(p, g) for p in per_seed], cfg) for g in first]
        note = NO_LATITUDES if by == "latitude" and not has_latitudes else None
        tables.append(GroupTable(by=by, groups=rows, note=note, **common))
    return tables[0], tables[1]


def _same_group(seed: SeedTestResult, group: GroupFigures) -> GroupFigures:
    """``group`` as ``seed`` measured it (every seed is evaluated on the same test tiles)."""
    mine = next((g for g in seed.groups if (g.by, g.name) == (group.by, group.name)), None)
    if mine is None or (mine.n_tiles, mine.n_objects) != (group.n_tiles, group.n_objects):
        raise ValueError(f"seed {seed.seed} was not evaluated on the tiles of {group.by} {group.name!r}")
    return mine


def _group_result(group: GroupFigures, seeds: list[GroupFigures], cfg: PipelineConfig) -> GroupResult:
    """One group over seeds: measured with at least ``evaluation.min_group_positive_tiles`` positive tiles and a
    negative one (its PR-AUC at 1:N re-weights the group's own negatives), else not, saying why."""
    floor = cfg.evaluation.min_group_positive_tiles
    reason = None
    if group.n_positive_tiles < floor:
        reason = f"{group.n_positive_tiles} positive tile(s), fewer than evaluation.min_group_positive_tiles ({floor})"
    elif group.n_negative_tiles == 0:
        reason = "no negative tile: its PR-AUC at a prevalence ratio re-weights the group's own negatives"
    counts = {"n_tiles": group.n_tiles, "n_positive_tiles": group.n_positive_tiles, "n_objects": group.n_objects}
    if reason is not None:
        return GroupResult(name=group.name, measured=False, reason=reason, **counts)
    return GroupResult(
        name=group.name,
        measured=True,
        pr_auc=_summary([g.pr_auc for g in seeds]),
        object_recall=_summary([g.object_recall for g in seeds]),
        **counts,
    )


def _summary(values: list[float]) -> MetricSummary:
    mu, sd = mean_std(values)
    return MetricSummary(mean=mu, std=sd, text=fmt(mu, sd))
