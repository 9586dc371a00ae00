"""The campaign's objects merged incrementally: a finish after new or re-mapped scenes redoes the merge only where
they are, and gives exactly what :func:`~rtscore.mapping.polygons.merge_parts` gives over every done scene
(docs/mapping.md, "The finish: fetching and merging").

The state of the last merge is kept in a file under the campaign's cache dir (:class:`MergeState`): the campaign
CRS and finest pixel, the done scenes in order (each as its id and the sha256 of its parts file), their footprints,
and every merged object as its member parts (scene, part index), its geometry and its partial flag. A merge against
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
makes; one kept is the one an earlier merge made from the same parts. The state is thrown away (a full merge) when
the campaign CRS or the finest pixel changed, when the kept scenes' order changed, or when it was written by other
merge code (:func:`~rtscore.identity.closure_hash` of this module). A state that cannot be read is a full merge, with
a warning: it is a cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.post_training import EvaluationConfig
from rtscore.data.raster.ground import projected_crs
from rtscore.identity.code import module_file, source_bytes
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
from rtscore.storage.files import atomic_writer

STATE_SCHEMA = 3  # 3: .npz columns (1 was a JSON document)
Key = tuple[str, str]  # a done scene: (scene id, sha256 of its parts file)
Member = tuple[str, int]  # an object's part: (scene id, index of the part in its scene)

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class MergedObject:
    """An object of the merge before numbering: its parts (in the done scenes' order), geometry, partial flag."""

    members: list[Member]
    geometry: Any
    partial: bool
    cut: bool  # a part of it is cut in its own scene (the partial test applies only then)
    row: RtsObject | None = None  # its statistics, areas and size bin once computed (object_id 0)


@dataclass
class MergeState:
    """What a merge leaves for the next one (module docstring); ``objects`` in no particular order."""

    code: str
    crs_wkt: str
    pixel: float
    scenes: list[Key]
    footprints: dict[str, Any]  # scene id -> footprint in the campaign CRS
    edges: list[float]  # the size bins the objects' rows were computed with
    bounds: dict[str, tuple[float, float, float, float] | None]  # scene id -> bounds of its parts (campaign CRS)
    objects: list[MergedObject] = field(default_factory=list)


@dataclass
class MergeReport:
    """What a merge redid: scenes added and removed since the state, objects re-grouped, partial flags re-tested."""

    full: bool
    added: int
    removed: int
    regrouped: int
    retested: int
    objects: int

    def text(self) -> str:
        kind = "full merge" if self.full else "incremental merge"
        return (
            f"{kind}: {self.added} scene(s) added, {self.removed} removed; {self.regrouped} object(s) re-grouped, "
            f"{self.retested} partial flag(s) re-tested, {self.objects} object(s) in all"
        )


@cache
def merge_code() -> str:
    """The code identity of a merge state: the sources of this module and of :mod:`~rtscore.mapping.polygons` (the
    grouping, union, partial test and reprojection), with the versions of shapely, GEOS, rasterio and PROJ under
    them. A state written by other code is not used."""
    import rasterio
    import shapely

    h = hashlib.sha256()
    for module in (__name__, "rtscore.mapping.polygons"):
        path = module_file(module)
        assert path is not None  # both are project modules
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
    prev = read_state(state_path) if state_path is not None else None
    why = None if prev is None else frame.refuses(prev)
    if why is not None:
        _log.info("campaign merge state %s not used (%s): full merge", state_path, why)
    edges = list(size_bins_m2) if size_bins_m2 is not None else list(EvaluationConfig().size_bins_m2)
    if prev is None or why is not None:
        prev = MergeState(frame.code, frame.crs_wkt, frame.pixel, [], {}, edges, {})
    merged, report = frame.update(prev)
    merged.sort(key=lambda o: (-o.geometry.area, frame.pos[o.members[0][0]], o.members[0][1]))
    objects = []
    for k, o in enumerate(merged, start=1):
        if o.row is None or prev.edges != edges:  # new, re-grouped, or other size bins
            o.row = _rts_object(0, o.geometry, [frame.part(m) for m in o.members], o.partial, frame.crs, edges)
        objects.append(numbered(o.row, k, o.partial))
    frame.release()  # every row is computed: the parts read for them can go before the state is written
    if state_path is not None and (report.added or report.removed or report.retested or prev.edges != edges):
        write_state(state_path, frame.state(merged, edges))
    return frame.crs, objects, report


class _Frame:
    """The done scenes in the campaign frame: CRS and finest pixel as ``merge_parts`` picks them, footprints and
    (on demand) parts reprojected into it, each scene's place in the order."""

    def __init__(self, scenes: Sequence[SceneParts], keys: list[Key], crs: Any, pixel: float, same: list[bool]):
        self.scenes, self.keys, self.crs, self.pixel, self.same = scenes, keys, crs, pixel, same
        self.code, self.crs_wkt = merge_code(), crs.to_wkt()
        self.pos = {k[0]: i for i, k in enumerate(keys)}
        self.tolerance = MERGE_TOLERANCE_PX * pixel
        self.footprints = [
            sc.footprint if ok else _reproject(sc.footprint, sc.crs, crs) for sc, ok in zip(scenes, same, strict=True)
        ]
        self._geoms: dict[int, list[Any]] = {}
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

    def refuses(self, prev: MergeState) -> str | None:
        """Why ``prev`` cannot be built on (None: it can): other merge code, CRS or finest pixel, or the scenes
        it holds that are still done come in another order."""
        if prev.code != self.code:
            return "written by other merge code"
        if prev.crs_wkt != self.crs_wkt or prev.pixel != self.pixel:
            return "the campaign CRS or its finest pixel changed"
        now, held = set(self.keys), set(prev.scenes)
        if [k for k in prev.scenes if k in now] != [k for k in self.keys if k in held]:
            return "the done scenes come in another order"
        return None

    def update(self, prev: MergeState) -> tuple[list[MergedObject], MergeReport]:
        """The objects over the done scenes from those of ``prev`` (module docstring)."""
        import shapely

        held, now = set(prev.scenes), set(self.keys)
        added = [i for i, k in enumerate(self.keys) if k not in held]
        removed = {sid for sid, sha in prev.scenes if (sid, sha) not in now}
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
        changed = [self.footprints[i] for i in added] + [prev.footprints[s] for s in removed if s in prev.footprints]
        retest = regrouped + self._near(kept, changed)
        tree = shapely.STRtree(self.footprints) if retest else None
        for o in retest:
            o.partial = o.cut and _leaves_footprint(o.geometry, tree, self.footprints, self.pixel)
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
        now = set(self.keys)  # a scene held by prev and still done (same parts): not added, not removed
        boxed = [s for s, sha in prev.scenes if (s, sha) in now and prev.bounds.get(s) is not None]
        if not new or not boxed:
            return set()
        boxes = shapely.box(*zip(*(prev.bounds[s] for s in boxed), strict=True))
        _, hit = shapely.STRtree(boxes).query(new, predicate="dwithin", distance=self.tolerance)
        near = sorted({boxed[j] for j in hit.tolist()})
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

    def state(self, merged: list[MergedObject], edges: list[float]) -> MergeState:
        fps = {k[0]: fp for k, fp in zip(self.keys, self.footprints, strict=True)}
        return MergeState(self.code, self.crs_wkt, self.pixel, list(self.keys), fps, edges, dict(self.bounds), merged)


def _bounds(geoms: list[Any]) -> tuple[float, float, float, float] | None:
    import shapely

    if not geoms:
        return None
    x0, y0, x1, y1 = (float(v) for v in shapely.total_bounds(geoms))
    return x0, y0, x1, y1


_BATCH = 10_000  # objects whose geometries are encoded together


def write_state(path: Path, state: MergeState) -> None:
    """The merge state as one ``.npz`` file (a campaign of 10^5 quads has ~10^6 objects: columns, not a document):
    ``head`` (JSON: schema, code, frame, edges, scenes, footprints and bounds, the labels of size bins and scene
    ids the rows use) and the objects
    as arrays: members (offsets, scene index, part index), geometries (hex-free WKB, concatenated, with offsets),
    partial and cut flags, and each row's figures. Geometries as WKB and floats as float64: both exact. Written
    under a temporary name, renamed into place; the WKB (~300 MB at 10^6 objects) streamed into its member batch by
    batch, never held whole."""
    import shapely

    objs = state.objects
    at = {k[0]: i for i, k in enumerate(state.scenes)}
    head = _state_head(state)
    bins = head["size_bins"]
    rows = [o.row for o in objs]
    none = RtsObject(0, None, (), 0, 0.0, 0.0, 0.0, 0.0, (0.0, 0.0, 0.0, 0.0), "", False)
    filled = [r if r is not None else none for r in rows]
    bin_at = {b: i for i, b in enumerate(bins)}
    names = sorted({n for r in rows if r is not None for n in r.scene_ids})  # the parts' own scene ids
    name_at = {n: i for i, n in enumerate(names)}
    head["row_scene_ids"] = names
    n = len(objs)
    wkb_sizes = np.zeros(n, np.int64)
    for k in range(0, n, _BATCH):  # sizes first: the geometries are encoded again, batch by batch, as written
        wkb_sizes[k : k + _BATCH] = [len(g) for g in shapely.to_wkb([o.geometry for o in objs[k : k + _BATCH]])]
    arrays: dict[str, np.ndarray] = {
        "head": np.frombuffer(json.dumps(head, allow_nan=False).encode(), np.uint8),
        "member_offsets": np.cumsum([0] + [len(o.members) for o in objs], dtype=np.int64),
        "member_scene": np.fromiter((at[m[0]] for o in objs for m in o.members), np.int32),
        "member_part": np.fromiter((m[1] for o in objs for m in o.members), np.int32),
        "wkb_offsets": np.concatenate([[0], np.cumsum(wkb_sizes)]).astype(np.int64),
        "partial": np.fromiter((o.partial for o in objs), np.bool_, n),
        "cut": np.fromiter((o.cut for o in objs), np.bool_, n),
        "has_row": np.fromiter((r is not None for r in rows), np.bool_, n),
        "row_scene_offsets": np.cumsum([0] + [len(r.scene_ids) for r in filled], dtype=np.int64),
        "row_scene_index": np.fromiter((name_at[n] for r in filled for n in r.scene_ids), np.int32),
        "n_pixels": np.fromiter((r.n_pixels for r in filled), np.int64, n),
        "figures": np.fromiter(
            ((r.prob_mean, r.prob_max, r.area_m2, r.ground_area_m2, *r.bbox) for r in filled),
            np.dtype((np.float64, 8)),
            n,
        ).reshape(n, 8),
        "size_bin": np.fromiter((bin_at.get(r.size_bin, -1) for r in filled), np.int32, n),
    }
    _write_npz(path, arrays, objs, wkb_sizes)


def _state_head(state: MergeState) -> dict[str, Any]:
    """The state's ``head``: what is one per campaign or per scene (module docstring), and the size bin labels."""
    import shapely

    return {
        "schema": STATE_SCHEMA,
        "code": state.code,
        "crs": state.crs_wkt,
        "pixel": state.pixel,
        "edges": state.edges,
        "scenes": [list(k) for k in state.scenes],
        "footprints": {s: shapely.to_wkb(g, hex=True) for s, g in state.footprints.items()},
        "bounds": {s: None if b is None else list(b) for s, b in state.bounds.items()},
        "size_bins": sorted({o.row.size_bin for o in state.objects if o.row is not None}),
    }


def _write_npz(path: Path, arrays: dict[str, np.ndarray], objs: list[MergedObject], wkb_sizes: np.ndarray) -> None:
    """``arrays`` as np.savez writes them (one ``.npy`` member each), then the objects' WKB as member ``wkb``, encoded
    and written batch by batch (``wkb_sizes``: each object's WKB length, for the member's header)."""
    import shapely

    n = len(objs)
    with atomic_writer(path, "wb") as f, zipfile.ZipFile(f, "w", allowZip64=True) as zf:
        for name, arr in arrays.items():  # what np.savez writes: one .npy member per array
            with zf.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, arr, allow_pickle=False)
        with zf.open("wkb.npy", "w", force_zip64=True) as member:  # streamed: never all the WKB at once
            total = int(wkb_sizes.sum())
            np.lib.format.write_array_header_2_0(member, {"descr": "|u1", "fortran_order": False, "shape": (total,)})
            for k in range(0, n, _BATCH):
                member.write(b"".join(shapely.to_wkb([o.geometry for o in objs[k : k + _BATCH]])))


def read_state(path: Path | None) -> MergeState | None:
    """The merge state at ``path``; None when there is none or it cannot be read (a warning: it is a cache)."""
    if path is None or not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            return _state_of(json.loads(z["head"].tobytes()), {k: z[k] for k in z.files if k != "head"})
    except Exception as err:  # any damage: a full merge rebuilds it
        _log.warning("campaign merge state %s unreadable (%s: %s): full merge", path, type(err).__name__, err)
        return None


def _state_of(head: dict[str, Any], a: dict[str, np.ndarray]) -> MergeState:
    import shapely

    if head.get("schema") != STATE_SCHEMA:
        raise ValueError(f"schema {head.get('schema')!r}, expected {STATE_SCHEMA}")
    scenes = [(str(s), str(h)) for s, h in head["scenes"]]
    ids, bins = [k[0] for k in scenes], [str(b) for b in head["size_bins"]]
    mo, wo, raw = a["member_offsets"], a["wkb_offsets"], a["wkb"].tobytes()
    n = len(mo) - 1
    if (
        len(wo) != n + 1
        or len(a["row_scene_offsets"]) != n + 1
        or any(len(a[k]) != n for k in ("partial", "cut", "has_row", "n_pixels", "size_bin"))
    ):
        raise ValueError("the object arrays differ in length (a torn file)")
    geoms = shapely.from_wkb(np.array([raw[wo[k] : wo[k + 1]] for k in range(n)], dtype=object)) if n else []
    scene, part, fig = a["member_scene"].tolist(), a["member_part"].tolist(), a["figures"]
    names, ro, ri = [str(v) for v in head["row_scene_ids"]], a["row_scene_offsets"], a["row_scene_index"].tolist()
    objects = []
    for k in range(n):
        members = [(ids[scene[j]], part[j]) for j in range(int(mo[k]), int(mo[k + 1]))]
        partial, g = bool(a["partial"][k]), geoms[k]
        row = None
        if a["has_row"][k]:
            f = fig[k].tolist()
            row = RtsObject(
                object_id=0,
                geometry=g,
                scene_ids=tuple(names[i] for i in ri[int(ro[k]) : int(ro[k + 1])]),
                n_pixels=int(a["n_pixels"][k]),
                prob_mean=f[0],
                prob_max=f[1],
                area_m2=f[2],
                ground_area_m2=f[3],
                bbox=(f[4], f[5], f[6], f[7]),
                size_bin=bins[a["size_bin"][k]] if a["size_bin"][k] >= 0 else "",
                partial=partial,
            )
        objects.append(MergedObject(members, g, partial, bool(a["cut"][k]), row))
    return MergeState(
        code=str(head["code"]),
        crs_wkt=str(head["crs"]),
        pixel=float(head["pixel"]),
        scenes=scenes,
        footprints={s: shapely.from_wkb(g) for s, g in head["footprints"].items()},
        edges=[float(e) for e in head["edges"]],
        bounds={s: None if b is None else (b[0], b[1], b[2], b[3]) for s, b in head["bounds"].items()},
        objects=objects,
    )
