"""The plan of an `rts tile` run, known before any tile is written, and the split rules checked on it.

Each candidate cell placed in a region carries what the geometry says of it without reading a pixel: the share of
the cell inside the scenes' footprints (an upper bound of its valid fraction: NoData inside a scene lowers it) and
whether it holds an RTS polygon whole (every vertex inside the cell, the polygon inside the footprints, a Positive
outline neither flagged ``ignore`` nor stale: an upper bound of label 1, since a polygon on NoData pixels or too
small to hold a pixel centre gives none). Whether a region gets a tile at all is decided exactly: its cells are
rendered (not written), best covered first, until one passes ``min_valid_fraction`` (:class:`TileProbe`).

The split rules (docs/geotiff.md, "Spatial blocking") are then checked on the plan (:func:`check_split_rules`): with
``splits`` the rules of a given split, without it the derivation ingestion will run, so a root that cannot be split
is refused before its first tile, not after tiling and ingestion.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rtscore.config.splits import SplitError
from rtscore.config.tiling import TilingConfig
from rtscore.data.splits.regions import derive_splits
from rtscore.data.tiling.inventory import Focus, Inventory, cell_scenes
from rtscore.data.tiling.pixels import Datasets, GridCell, Scene, TilePixels, TilingError, render_pixels

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Placed:
    """A candidate cell inside a region: the polygons touching it, its RegionName, the share of it inside the scene
    footprints and whether it holds an RTS whole (the plan's positivity)."""

    cell: GridCell
    touching: list[int]
    region: str
    coverage: float = 1.0
    whole: bool = False


def kept(px: TilePixels | None, cfg: TilingConfig) -> bool:
    """The one rule of a tile written: a valid pixel, and at least ``min_valid_fraction`` of its pixels valid."""
    return px is not None and float(px.valid.mean()) >= cfg.min_valid_fraction


def scene_outlines(scenes: Sequence[Scene], datasets: Datasets, grid_crs: str) -> list[Any]:
    """Each scene's raster extent on the grid CRS, in the scenes' order (each edge densified: a UTM scene is a
    curved quadrilateral in Web Mercator, not its bounding box)."""
    import shapely
    from rasterio.warp import transform

    t = np.linspace(0.0, 1.0, 21)
    shapes = []
    for scene in scenes:
        src = datasets.get(scene.path)
        w, h = src.width, src.height
        cols = np.concatenate([w * t, np.full(21, w), w * t[::-1], np.zeros(21)])
        rows = np.concatenate([np.zeros(21), h * t, np.full(21, h), h * t[::-1]])
        xs, ys = src.transform @ (cols, rows)
        gx, gy = transform(src.crs, grid_crs, np.asarray(xs).tolist(), np.asarray(ys).tolist())
        shapes.append(shapely.make_valid(shapely.Polygon(np.c_[gx, gy])))
    return shapes


def with_estimates(placed: Sequence[Placed], inventory: Inventory, footprints: Any) -> list[Placed]:
    """``placed`` with each cell's coverage of the footprints and whether it holds an RTS whole."""
    import shapely

    if not placed:
        return []
    boxes = shapely.box(*np.array([p.cell.bounds for p in placed]).T)
    coverage = shapely.area(shapely.intersection(boxes, footprints)) / shapely.area(boxes)
    in_scenes = shapely.covers(footprints, np.array(inventory.geoms, dtype=object))
    out = []
    for p, box, cov in zip(placed, boxes, coverage, strict=True):
        whole = any(
            in_scenes[i] and inventory.is_rts(i) and shapely.covers(box, inventory.geoms[i]) for i in p.touching
        )
        out.append(Placed(p.cell, p.touching, p.region, float(cov), bool(whole)))
    return out


def focus_estimates(
    placed: Sequence[Placed],
    inventory: Inventory,
    outlines: Sequence[Any],
    scenes: Sequence[Scene],
    focus: Focus | None,
) -> list[Placed]:
    """:func:`with_estimates` on the footprints of the scenes each cell is cut from (:func:`cell_scenes`): a scene of
    ``focus.scenes`` counts only in the cells touching its areas. ``outlines``: :func:`scene_outlines` of ``scenes``."""
    import shapely

    if focus is None:
        return with_estimates(placed, inventory, shapely.union_all(outlines))
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)  # the cells cut from the same scenes
    for k, p in enumerate(placed):
        groups[tuple(i for i, s in enumerate(scenes) if focus.gives(s.path, p.cell))].append(k)
    out: dict[int, Placed] = {}
    for ids, ks in groups.items():
        union = shapely.union_all([outlines[i] for i in ids])
        out.update(zip(ks, with_estimates([placed[k] for k in ks], inventory, union), strict=True))
    return [out[k] for k in range(len(placed))]


class TileProbe:
    """Whether a region gets a tile: its cells rendered (not written), best covered first, until one is kept.

    Exact (the same rendering as the tiles'), and cheap for a region with a tile (usually its first cell); a region
    whose every cell is NoData or sparse has each of them rendered once."""

    def __init__(
        self,
        cfg: TilingConfig,
        scenes: list[Scene],
        datasets: Datasets,
        placed: Sequence[Placed],
        focus: Focus | None = None,
    ) -> None:
        self.cfg, self.scenes, self.datasets, self.focus = cfg, scenes, datasets, focus
        self.cells: dict[str, list[Placed]] = defaultdict(list)
        for p in placed:
            self.cells[p.region].append(p)
        self.known: dict[str, bool] = {}
        self.rendered = 0

    def has_tile(self, region: str) -> bool:
        if region not in self.known:
            candidates = sorted((p for p in self.cells.get(region, []) if p.coverage > 0), key=lambda p: -p.coverage)
            self.known[region] = any(self._kept(p.cell) for p in candidates)
        return self.known[region]

    def _kept(self, cell: GridCell) -> bool:
        self.rendered += 1
        return kept(render_pixels(cell, cell_scenes(self.focus, cell, self.scenes), self.cfg, self.datasets), self.cfg)

    def why_none(self, region: str) -> str:
        """Why ``region`` gets no tile (it does not: :meth:`has_tile` is False)."""
        n = len(self.cells.get(region, []))
        if n == 0:
            return f"{region!r} (no grid cell of the scenes is in it)"
        return (
            f"{region!r} (none of its {n} cell(s) has at least {self.cfg.min_valid_fraction:.0%} valid pixels, "
            "min_valid_fraction)"
        )

    def regions(self) -> list[str]:
        """The regions of the placed cells, sorted."""
        return sorted(self.cells)


@dataclass
class PlanSplit:
    """The plan per region with a tile: estimated tiles and tiles holding a whole RTS; the warnings of the rules."""

    tiles: dict[str, int]
    positives: dict[str, int]
    warnings: list[str] = field(default_factory=list)

    @property
    def n_tiles(self) -> int:
        return sum(self.tiles.values())

    @property
    def n_positive(self) -> int:
        return sum(self.positives.values())


def estimate(cfg: TilingConfig, probe: TileProbe) -> PlanSplit:
    """Per region that gets a tile: the cells covered at least ``min_valid_fraction`` (at least the one the probe
    kept) and those of them holding an RTS whole. Both are upper bounds: NoData inside a scene lowers them."""
    tiles: dict[str, int] = {}
    positives: dict[str, int] = {}
    for region in probe.regions():
        if not probe.has_tile(region):
            continue
        cells = [p for p in probe.cells[region] if p.coverage >= cfg.min_valid_fraction]
        tiles[region] = max(len(cells), 1)
        positives[region] = sum(p.whole for p in cells)
    return PlanSplit(tiles, positives)


def check_split_rules(cfg: TilingConfig, probe: TileProbe) -> PlanSplit:
    """The split rules on the plan, before any tile is written: every problem in one :class:`TilingError`.

    With ``splits``: every region that gets a tile is in a split; each split listed gets a tile; val (when listed)
    spans at least ``split_rules.min_val_regions`` regions with a tile. Warnings (returned): a listed region that
    gets no tile; test or val (when listed) with fewer than ``split_rules.min_test_positives`` or
    ``split_rules.min_val_positives`` tiles holding a whole RTS.
    A split not listed is left to another data root.

    Without ``splits``: the split ingestion will derive (`rtscore.data.splits.regions.derive_splits`, the same rules and
    thresholds) is derived from the plan, and a plan it cannot split is refused, naming the rule.
    """
    plan = estimate(cfg, probe)
    problems = _given_split(cfg, probe, plan) if cfg.splits is not None else _derivable(cfg, plan)
    if problems:
        raise TilingError(problems[0] if len(problems) == 1 else "\n  " + "\n  ".join(problems))
    return plan


def _given_split(cfg: TilingConfig, probe: TileProbe, plan: PlanSplit) -> list[str]:
    """The problems of ``cfg.splits`` on the plan; its warnings appended to ``plan.warnings``."""
    assert cfg.splits is not None
    rules = cfg.split_rules
    listed = {r: s for s, rs in cfg.splits.items() for r in rs}
    problems = []
    strays = sorted(set(plan.tiles) - set(listed))
    if strays:
        folded = {_fold(r): (r, s) for r, s in listed.items()}
        near = [f"{r!r} ~ {folded[_fold(r)][0]!r} in {folded[_fold(r)][1]}" for r in strays if _fold(r) in folded]
        problems.append(
            f"splits: region(s) {strays} of the tiles are in no split (splits lists {sorted(listed)}); every region "
            "must be in exactly one split" + (f" (another spelling: {'; '.join(near)})" if near else "")
        )
    for split in SPLITS:
        if split not in cfg.splits:
            continue
        regions = cfg.splits[split]
        with_tiles = [r for r in regions if r in plan.tiles]
        without = [probe.why_none(r) for r in regions if r not in plan.tiles]
        if not with_tiles:
            problems.append(
                f"splits.{split}: none of its regions gets a tile: {', '.join(without) or 'it lists none'}; an empty "
                "split cannot be ingested (list regions of these scenes, or drop the split for another data root)"
            )
            continue
        if without:
            plan.warnings.append(f"splits.{split}: region(s) that get no tile: {', '.join(without)}")
        if split == "val" and len(with_tiles) < rules.min_val_regions:
            problems.append(
                f"splits.val: spans {len(with_tiles)} region(s) with a tile {with_tiles}; split_rules.min_val_regions "
                f"is {rules.min_val_regions} (validate-data fails val under the pipeline config's "
                "splits.min_val_regions): list more regions in val, or lower both"
            )
        positives = sum(plan.positives[r] for r in with_tiles)
        if split == "test" and positives < rules.min_test_positives:
            plan.warnings.append(
                f"splits.test: about {positives} tile(s) hold an RTS whole (an upper bound from the plan), fewer "
                f"than split_rules.min_test_positives={rules.min_test_positives}: test metrics will be noisy"
            )
        if split == "val" and positives < rules.min_val_positives:
            plan.warnings.append(
                f"splits.val: about {positives} tile(s) hold an RTS whole (an upper bound from the plan), fewer "
                f"than split_rules.min_val_positives={rules.min_val_positives}: val PR-AUC, and early stopping on "
                "it, rest on few positives"
            )
    return problems


def _derivable(cfg: TilingConfig, plan: PlanSplit) -> list[str]:
    """Why the split derived at ingestion cannot succeed on the plan (empty: it can)."""
    rules = cfg.split_rules
    head = (
        "no splits in the config, so ingestion derives the split of this root (docs/geotiff.md, spatial blocking), "
        f"and the plan ({plan.n_tiles} tiles at most, {plan.n_positive} holding an RTS whole at most, in "
        f"{len(plan.tiles)} region(s) {sorted(plan.tiles)}) cannot give one: "
    )
    fixes = (
        "; give splits (train, val, test regions) in the tiling config, tile more regions, or lower split_rules "
        "together with the pipeline config's splits section"
    )
    problems = []
    need_regions = rules.min_val_regions + 2
    if len(plan.tiles) < need_regions:
        problems.append(
            f"{len(plan.tiles)} region(s) get a tile; the derivation needs at least {need_regions} (test, "
            f"split_rules.min_val_regions={rules.min_val_regions} for val, train)"
        )
    if plan.n_positive < rules.min_test_positives:
        problems.append(
            f"at most {plan.n_positive} tile(s) hold an RTS whole; test alone needs "
            f"split_rules.min_test_positives={rules.min_test_positives}"
        )
    if not problems:
        try:
            derive_splits(
                planned_rows(plan),
                min_test_positives=rules.min_test_positives,
                min_val_regions=rules.min_val_regions,
                min_val_positives=rules.min_val_positives,
            )
        except SplitError as err:
            problems.append(str(err))
    return [head + p + fixes for p in problems]


def planned_rows(plan: PlanSplit) -> list[dict[str, str]]:
    """metadata.csv rows as the plan expects them (RegionName and TrainClass), for the derivation."""
    rows = []
    for region, n in plan.tiles.items():
        pos = plan.positives[region]
        rows += [{"RegionName": region, "TrainClass": "positive" if k < pos else "negative"} for k in range(n)]
    return rows


def _fold(region: str) -> str:
    return " ".join(region.split()).casefold()


def plan_line(cells: int, placed: Sequence[Placed], cfg: TilingConfig, n_scenes: int) -> str:
    """The plan's size, logged before the first tile: cells, cells in a region, estimated tiles and positives."""
    covered = [p for p in placed if p.coverage >= cfg.min_valid_fraction]
    pixels = len(covered) * cfg.grid.tile_size**2
    return (
        f"rts tile: plan: {cells} grid cells of {cfg.grid.tile_size} px at {cfg.grid.pixel_size:g} {cfg.grid.crs} "
        f"units over {n_scenes} scene(s), {len(placed)} in a region; about {len(covered)} tiles (cells at least "
        f"{cfg.min_valid_fraction:.0%} inside a scene; {pixels / 1e6:.3g} Mpx), about "
        f"{sum(p.whole for p in covered)} holding an RTS whole"
    )
