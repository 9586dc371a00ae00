"""The campaign's objects merged incrementally: a finish after new or re-mapped scenes redoes the merge only where
they are, and gives exactly what :func:`~rtscore.mapping.polygons.merge_parts` gives over every done scene
(docs/mapping.md, "The finish: fetching and merging").

The state of the last merge is kept under the campaign's cache dir (:class:`MergeState`,
:mod:`~rtscore.mapping.merge_store`): a head with the campaign CRS and finest pixel, the done scenes in order (each
as its id and the sha256 of its parts file), their footprints and parts' bounds, and for each scene the spatial
blocks holding its objects; and one file per block with its merged objects (member parts as (scene, part index),
geometry, partial flag, statistics). A merge against
that state:

- sets aside the scenes whose (id, parts sha256) it does not hold any more (*removed*: re-mapped or no longer done)
  and takes those it does not hold yet (*added*);
- re-groups only the parts of the objects holding a removed scene's part or touching an added part (within the merge
  tolerance: the predicate of ``merge_parts``), with the added parts. Every other object is a connected component of
  the touching graph before and after, so it stays exactly as it was;
- recomputes the partial flag of the re-grouped objects and of those within half a pixel of an added or removed
  footprint (the only ones whose nearby footprints changed);
- orders and numbers the objects by ``merge_parts``' rule: descending area, ties by their first part's place among
  the done scenes' parts.

Each object's geometry is the union of its parts in the order of the done scenes, as ``merge_parts`` forms it, and
the partial test runs against every done footprint in the same tree, so an object redone is the object a full merge
makes; one kept is the one an earlier merge made from the same parts. Only the blocks that can hold such objects
are read as objects and written again (:meth:`_Frame.dirty_blocks`); the others are read as columns for the layer
(:class:`~rtscore.mapping.objects_layer.ObjectTable`), never as shapes. The state is thrown away (a full merge) when
the campaign CRS, the finest pixel, the size bins or the block size changed, when the kept scenes' order changed, or
when it was written by other merge code (:func:`merge_code`). A state that cannot be read (a block torn, or not the
one the head records) is a full merge, with a warning: it is a cache.
"""

from __future__ import annotations

import hashlib
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.post_training import EvaluationConfig
from rtscore.data.raster.ground import projected_crs
from rtscore.identity.code import module_file, source_bytes
from rtscore.mapping.merge_codec import (
    Key,
    Member,
    MergedObject,
    MergeState,
    block_table,
    decode_block,
    encode_block,
    read_state,
    write_state,
)
from rtscore.mapping.merge_store import block_names, block_size, blocks_dir, clear_blocks, read_raw, remove, write_raw
from rtscore.mapping.objects_layer import ObjectTable
from rtscore.mapping.polygons import (
    MERGE_TOLERANCE_PX,
    PARTIAL_REACH_PX,
    LazyParts,
    PolygonsError,
    RtsObject,
    SceneParts,
    _leaves_footprint,
    _pixel_scale,
    _reproject,
    _rts_object,
    _touching_groups,
    _union,
    numbered,
)

__all__ = ["MergeReport", "MergeState", "MergedObject", "merge_code", "merge_incremental", "merge_table", "read_state"]

_log = logging.getLogger(__name__)


@dataclass
class MergeReport:
    """What a merge redid: scenes added and removed since the state, objects re-grouped, partial flags re-tested,
    blocks rewritten (of all blocks)."""

    full: bool
    added: int
    removed: int
    regrouped: int
    retested: int
    objects: int
    blocks_written: int = 0
    blocks: int = 0

    def text(self) -> str:
        kind = "full merge" if self.full else "incremental merge"
        return (
            f"{kind}: {self.added} scene(s) added, {self.removed} removed; {self.regrouped} object(s) re-grouped, "
            f"{self.retested} partial flag(s) re-tested, {self.objects} object(s) in all; "
            f"{self.blocks_written} of {self.blocks} block(s) written"
        )


@cache
def merge_code() -> str:
    """The code identity of a merge state: the sources of this module, of :mod:`~rtscore.mapping.merge_codec`,
    :mod:`~rtscore.mapping.merge_store` and of :mod:`~rtscore.mapping.polygons` (the grouping, union, partial test
    and reprojection), with the versions of shapely, GEOS, rasterio and PROJ under them. A state written by other
    code is not used."""
    import rasterio
    import shapely

    h = hashlib.sha256()
    for module in (__name__, "rtscore.mapping.merge_codec", "rtscore.mapping.merge_store", "rtscore.mapping.polygons"):
        path = module_file(module)
        assert path is not None  # project modules
        h.update(hashlib.sha256(source_bytes(path)).digest())
    h.update(f"{shapely.__version__} {shapely.geos_version_string} {rasterio.__version__} ".encode())
    h.update(str(rasterio.__proj_version__).encode())
    return h.hexdigest()


def merge_incremental(
    scenes: Sequence[SceneParts],
    shas: Sequence[str],
    state_path: Path | None,
    size_bins_m2: Sequence[float] | None = None,
) -> tuple[Any, list[RtsObject], MergeReport]:
    """The campaign's objects as :func:`merge_table` gives them, each an :class:`RtsObject` (for a few thousand;
    a campaign's finish keeps the table)."""
    crs, table, report = merge_table(scenes, shas, state_path, size_bins_m2)
    return crs, table.objects(), report


def merge_table(
    scenes: Sequence[SceneParts],
    shas: Sequence[str],
    state_path: Path | None,
    size_bins_m2: Sequence[float] | None = None,
) -> tuple[Any, ObjectTable, MergeReport]:
    """The campaign's objects from the done scenes' parts, as :func:`~rtscore.mapping.polygons.merge_parts` makes
    them (same objects, geometries, flags, order and ids), redoing only what changed since the state at
    ``state_path`` (module docstring); the new state is written there. ``shas``: each scene's parts file sha256
    (what identifies its parts). ``state_path`` None: a full merge, no state kept.

    Raises:
        PolygonsError: no scenes, or a campaign CRS without a ground size (as ``merge_parts``).
    """
    if not scenes:
        raise PolygonsError("merge_parts: no scenes; a campaign maps at least one")
    if len(shas) != len(scenes):
        raise ValueError(f"merge_incremental: {len(scenes)} scenes but {len(shas)} parts sha256s")
    frame = _Frame.of(scenes, [(sc.scene_id, sha) for sc, sha in zip(scenes, shas, strict=True)])
    edges = list(size_bins_m2) if size_bins_m2 is not None else list(EvaluationConfig().size_bins_m2)
    store = _Blocks(state_path)
    prev = read_state(state_path) if state_path is not None else None
    why = None if prev is None else frame.refuses(prev, edges)
    if why is not None:
        _log.info("campaign merge state %s not used (%s): full merge", state_path, why)
    if prev is not None and why is None:
        try:  # every block's columns (the layer needs them all), checked; the objects of those near a change
            store.check(prev.blocks)
            store.load(prev, frame.dirty_blocks(prev))
        except (OSError, ValueError, KeyError) as err:  # a block torn or not the head's: a full merge rebuilds all
            _log.warning("campaign merge state %s unreadable (%s: %s): full merge", state_path, type(err).__name__, err)
            prev = None
    if prev is None or why is not None:
        prev = MergeState(frame.code, frame.crs_wkt, frame.pixel, edges, frame.block, [], {}, {}, {}, {})
        store.clear()
    merged, report = frame.update(prev)
    for o in merged:
        if o.row is None:  # new or re-grouped
            o.row = _rts_object(0, o.geometry, [frame.part(m) for m in o.members], o.partial, frame.crs, edges)
    frame.release()  # every row is computed: the parts read for them can go before the state is written
    changed = bool(report.added or report.removed or report.retested or report.full)
    written = store.update(prev, merged, frame.block) if changed else []
    blocks = {b: prev.blocks[b] for b in prev.blocks if b not in written} | {
        b: store.held[b] for b in written if b in store.held
    }
    if state_path is not None and changed:
        write_state(state_path, frame.state(prev, blocks, edges))
    table = store.table(blocks, frame.pos)
    report.objects, report.blocks_written, report.blocks = len(table), len(written), len(blocks)
    return frame.crs, table, report


class _Frame:
    """The done scenes in the campaign frame: CRS and finest pixel as ``merge_parts`` picks them, footprints and
    (on demand) parts reprojected into it, each scene's place in the order."""

    def __init__(self, scenes: Sequence[SceneParts], keys: list[Key], crs: Any, pixel: float, same: list[bool]):
        self.scenes, self.keys, self.crs, self.pixel, self.same = scenes, keys, crs, pixel, same
        self.code, self.crs_wkt = merge_code(), crs.to_wkt()
        self.block = block_size(crs)
        self.pos = {k[0]: i for i, k in enumerate(keys)}
        self.tolerance = MERGE_TOLERANCE_PX * pixel
        self.footprints = [
            sc.footprint if ok else _reproject(sc.footprint, sc.crs, crs) for sc, ok in zip(scenes, same, strict=True)
        ]
        self._geoms: dict[int, list[Any]] = {}
        self._boxes: tuple[list[str], Any] | None = None  # _held_boxes
        self.bounds: dict[str, tuple[float, float, float, float] | None] = {}

    @classmethod
    def of(cls, scenes: Sequence[SceneParts], keys: list[Key]) -> _Frame:
        """CRS (the first scene's) and finest pixel exactly as ``merge_parts`` computes them."""
        from rasterio.crs import CRS

        crs = projected_crs(scenes[0].crs, "campaign CRS")
        pixel, same = math.inf, []
        for sc in scenes:
            ok = CRS.from_user_input(sc.crs) == crs
            pixel = min(pixel, sc.pixel_size * (1.0 if ok else _pixel_scale(sc, crs)))
            same.append(ok)
        return cls(scenes, keys, crs, pixel, same)

    def geoms(self, i: int) -> list[Any]:
        """Scene ``i``'s parts in the campaign CRS (reprojected once)."""
        if i not in self._geoms:
            sc = self.scenes[i]
            self._geoms[i] = [
                p.geometry if self.same[i] else _reproject(p.geometry, sc.crs, self.crs) for p in sc.parts
            ]
        return self._geoms[i]

    def release(self) -> None:
        """Forget the parts read so far (a scene's :class:`~rtscore.mapping.polygons.LazyParts` reads them again if
        asked) and their reprojections."""
        self._geoms.clear()
        for sc in self.scenes:
            if isinstance(sc.parts, LazyParts):
                sc.parts.release()

    def part(self, m: Member) -> Any:
        return self.scenes[self.pos[m[0]]].parts[m[1]]

    def refuses(self, prev: MergeState, edges: list[float]) -> str | None:
        """Why ``prev`` cannot be built on (None: it can): other merge code, CRS, finest pixel, size bins or block
        size, or the scenes it holds that are still done come in another order."""
        if prev.code != self.code:
            return "written by other merge code"
        if prev.crs_wkt != self.crs_wkt or prev.pixel != self.pixel:
            return "the campaign CRS or its finest pixel changed"
        if prev.edges != edges or prev.block != self.block:
            return "the size bins or the block size changed"
        now, held = set(self.keys), set(prev.scenes)
        if [k for k in prev.scenes if k in now] != [k for k in self.keys if k in held]:
            return "the done scenes come in another order"
        return None

    def _added(self, prev: MergeState) -> list[int]:
        held = set(prev.scenes)
        return [i for i, k in enumerate(self.keys) if k not in held]

    def _removed(self, prev: MergeState) -> set[str]:
        now = set(self.keys)
        return {sid for sid, sha in prev.scenes if (sid, sha) not in now}

    def _changed_footprints(self, prev: MergeState, added: list[int], removed: set[str]) -> list[Any]:
        return [self.footprints[i] for i in added] + [prev.footprint(s) for s in removed if s in prev.footprint_wkb]

    def dirty_blocks(self, prev: MergeState) -> set[str]:
        """The blocks whose objects a merge against ``prev`` may change: those holding an object with a part in a
        removed scene, in a scene whose parts come within the merge tolerance of an added part, or in one within
        reach of the partial test of an added or removed footprint (the bounds of a scene's parts hold every part,
        and an object lies within the tolerance of its parts)."""
        added, removed = self._added(prev), self._removed(prev)
        scenes = set(removed)
        scenes |= self._scenes_near(prev, [g for i in added for g in self.geoms(i)], self.tolerance)
        reach = PARTIAL_REACH_PX * self.pixel * 1.01 + self.tolerance
        scenes |= self._scenes_near(prev, self._changed_footprints(prev, added, removed), reach)
        return {b for s in scenes for b in prev.scene_blocks.get(s, ())}

    def _scenes_near(self, prev: MergeState, geoms: list[Any], distance: float) -> set[str]:
        """The scenes ``prev`` holds, still done with the same parts, whose parts' bounds come within ``distance``
        of one of ``geoms``."""
        if not geoms:
            return set()
        boxed, tree = self._held_boxes(prev)
        if not boxed:
            return set()
        _, hit = tree.query(geoms, predicate="dwithin", distance=distance)
        return {boxed[j] for j in hit.tolist()}

    def _held_boxes(self, prev: MergeState) -> tuple[list[str], Any]:
        """The scenes ``prev`` holds, still done with the same parts and with parts, and a tree of their parts'
        bounds (built once a merge: a campaign holds 10^5 scenes)."""
        import shapely

        if self._boxes is None:
            now = set(self.keys)
            boxed = [s for s, sha in prev.scenes if (s, sha) in now and prev.bounds.get(s) is not None]
            bounds = np.array([prev.bounds[s] for s in boxed], dtype=np.float64).reshape(-1, 4)
            self._boxes = boxed, shapely.STRtree(shapely.box(bounds[:, 0], bounds[:, 1], bounds[:, 2], bounds[:, 3]))
        return self._boxes

    def update(self, prev: MergeState) -> tuple[list[MergedObject], MergeReport]:
        """The objects of ``prev``'s loaded blocks, redone where scenes changed (module docstring)."""
        import shapely

        added, removed = self._added(prev), self._removed(prev)
        dirty = {j for j, o in enumerate(prev.objects) if any(s in removed for s, _ in o.members)}
        dirty |= self._touched(prev, added)
        pool = sorted(
            {m for j in dirty for m in prev.objects[j].members if m[0] not in removed}
            | {(self.keys[i][0], p) for i in added for p in range(len(self.scenes[i].parts))},
            key=lambda m: (self.pos[m[0]], m[1]),
        )
        geoms = [self.geoms(self.pos[s])[p] for s, p in pool]
        regrouped = []
        for g in _touching_groups(geoms, self.tolerance):
            members = [pool[i] for i in g]
            cut = any(self.part(m).partial for m in members)
            regrouped.append(MergedObject(members, _union([geoms[i] for i in g], self.tolerance), False, cut))
        kept = [o for j, o in enumerate(prev.objects) if j not in dirty]
        retest = regrouped + self._near(kept, self._changed_footprints(prev, added, removed))
        tree = shapely.STRtree(self.footprints) if retest else None
        for o in retest:
            partial = o.cut and _leaves_footprint(o.geometry, tree, self.footprints, self.pixel)
            if o.row is not None and partial != o.partial:
                o.row = numbered(o.row, 0, partial)
            o.partial = partial
        merged = kept + regrouped
        self.bounds = {s: b for s, b in prev.bounds.items() if s not in removed}
        self.bounds.update({self.keys[i][0]: _bounds(self.geoms(i)) for i in added})
        full = not prev.scenes
        return merged, MergeReport(full, len(added), len(removed), len(regrouped), len(retest), len(merged))

    def _touched(self, prev: MergeState, added: list[int]) -> set[int]:
        """Objects of ``prev`` with a part within the merge tolerance of an added part: only scenes whose parts'
        bounds come that close are looked at (exact: a part lies inside its scene's bounds)."""
        import shapely

        new = [g for i in added for g in self.geoms(i)]
        near = sorted(self._scenes_near(prev, new, self.tolerance))
        members = [(s, p) for s in near for p in range(len(self.scenes[self.pos[s]].parts))]
        if not members:
            return set()
        tree = shapely.STRtree([self.geoms(self.pos[s])[p] for s, p in members])
        _, hit = tree.query(new, predicate="dwithin", distance=self.tolerance)
        touched = {members[j] for j in hit.tolist()}
        return {j for j, o in enumerate(prev.objects) if any(m in touched for m in o.members)}

    def _near(self, kept: list[MergedObject], changed: list[Any]) -> list[MergedObject]:
        """Objects of ``kept`` that may be partial (a part cut in its scene) within half a pixel of a footprint
        added or removed: the only ones whose partial test can change (tested as a distance, which the half-pixel
        buffer of the test never exceeds)."""
        import shapely

        cut = [o for o in kept if o.cut]
        if not cut or not changed:
            return []
        tree = shapely.STRtree([o.geometry for o in cut])
        _, hit = tree.query(changed, predicate="dwithin", distance=PARTIAL_REACH_PX * self.pixel * 1.01)
        return [cut[j] for j in sorted(set(hit.tolist()))]

    def state(self, prev: MergeState, blocks: dict[str, tuple[int, int]], edges: list[float]) -> MergeState:
        """The head after this merge: the done scenes, their footprints and bounds, ``prev``'s scene-to-block index
        as the merge updated it, and ``blocks``."""
        import shapely

        wkb = shapely.to_wkb(np.asarray(self.footprints, dtype=object)) if self.footprints else []
        fps = {k[0]: w for k, w in zip(self.keys, wkb, strict=True)}
        index = {k[0]: prev.scene_blocks.get(k[0], set()) for k in self.keys}
        return MergeState(
            self.code,
            self.crs_wkt,
            self.pixel,
            edges,
            self.block,
            list(self.keys),
            fps,
            dict(self.bounds),
            index,
            blocks,
        )


def _bounds(geoms: list[Any]) -> tuple[float, float, float, float] | None:
    import shapely

    if not geoms:
        return None
    x0, y0, x1, y1 = (float(v) for v in shapely.total_bounds(geoms))
    return x0, y0, x1, y1


class _Blocks:
    """The state's block files (module docstring of :mod:`~rtscore.mapping.merge_store`), or, with no state path,
    the same blocks held in memory for one merge."""

    def __init__(self, head: Path | None) -> None:
        self.dir = None if head is None else blocks_dir(head)
        self.held: dict[str, tuple[int, int]] = {}  # blocks written by this merge: (CRC-32, objects)
        self._memory: dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]] = {}  # written or read by this merge
        self._head = head

    def clear(self) -> None:
        self._memory.clear()
        if self._head is not None:
            clear_blocks(self._head)

    def read(self, name: str, crc: int) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        if name not in self._memory:
            if self.dir is None:
                raise KeyError(f"block {name}: not held")
            try:
                self._memory[name] = read_raw(self.dir / name, crc)
            except (OSError, ValueError) as err:
                raise ValueError(f"block {name}: {err}") from None
        return self._memory[name]

    def check(self, blocks: dict[str, tuple[int, int]]) -> None:
        """Read every block's arrays (kept for the table), each checked against the CRC-32 the head holds."""
        for name, (crc, _) in sorted(blocks.items()):
            self.read(name, crc)

    def load(self, prev: MergeState, names: set[str]) -> None:
        """The objects of blocks ``names`` into ``prev`` (each block read once)."""
        for name in sorted(names - prev.loaded):
            fields, arrays = self.read(name, prev.blocks[name][0])
            prev.objects += decode_block(fields, arrays)
            prev.loaded.add(name)

    def update(self, prev: MergeState, merged: list[MergedObject], size: float) -> list[str]:
        """Write the blocks of ``merged`` (the loaded blocks' objects as merged now), loading first any block a
        new object falls in that was not loaded, and remove loaded blocks left empty; ``prev.scene_blocks``
        follows. ``merged`` and ``prev.objects`` are emptied: an object's geometry is freed once its block is
        encoded. Returns the blocks written or removed."""
        import shapely

        names = block_names(shapely.bounds(np.asarray([o.geometry for o in merged], dtype=object)), size)
        extra = {b for b in names if b in prev.blocks} - prev.loaded
        if extra:  # an object re-grouped into a block not loaded: that block is written again whole
            before = len(prev.objects)
            self.load(prev, extra)
            more = prev.objects[before:]
            merged += more
            names += block_names(shapely.bounds(np.asarray([o.geometry for o in more], dtype=object)), size)
        by_block: dict[str, list[MergedObject]] = {}
        for o, b in zip(merged, names, strict=True):
            by_block.setdefault(b, []).append(o)
        merged.clear()  # each block's objects go once it is written (a full merge holds ~10^6 of them)
        prev.objects.clear()
        for s in list(prev.scene_blocks):  # the loaded blocks are redone: their entries too
            prev.scene_blocks[s] -= prev.loaded
        written = sorted(prev.loaded | set(by_block))
        for b in written:
            objs = by_block.pop(b, [])
            if objs:
                fields, arrays = encode_block(objs)
                crc = self._write(b, fields, arrays)
                self.held[b] = (crc, len(objs))
                for o in objs:
                    for s, _ in o.members:
                        prev.scene_blocks.setdefault(s, set()).add(b)
            else:
                self._memory.pop(b, None)
                if self.dir is not None:
                    remove(self.dir / b)
        return written

    def _write(self, name: str, fields: dict[str, Any], arrays: dict[str, np.ndarray]) -> int:
        self._memory[name] = (fields, arrays)
        if self.dir is None:
            return 0
        return write_raw(self.dir / name, fields, arrays)

    def table(self, blocks: dict[str, tuple[int, int]], pos: dict[str, int]) -> ObjectTable:
        """Every block's objects as one table in ``merge_parts``' order: descending area, ties by the first part's
        place among the done scenes' parts (``pos``: a scene's place). Only columns are read; the blocks held in
        memory are handed over (this is the merge's last use of them)."""
        names = [b for b, (crc, n) in sorted(blocks.items()) if n]
        for b in names:
            self.read(b, blocks[b][0])
        return block_table(names, self._memory, pos)
