"""The incremental merge's state on disk (docs/mapping.md, "Merging, incrementally"): what one merge leaves for the
next (:class:`MergeState`, its objects :class:`MergedObject`), a block's objects encoded as raw arrays and back, the
blocks' columns gathered into the layer's :class:`~rtscore.mapping.objects_layer.ObjectTable`, and the head written
and read. The file format (raw arrays, CRC-32, one file a block) is :mod:`~rtscore.mapping.merge_store`'s; the
merge itself is :mod:`~rtscore.mapping.merge`'s.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.mapping.merge_store import read_raw, write_raw
from rtscore.mapping.objects_layer import ObjectTable
from rtscore.mapping.polygons import RtsObject

STATE_SCHEMA = 4  # 4: a head and per-block files (3: one .npz; 1: a JSON document)
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
    """What a merge leaves for the next one (:mod:`~rtscore.mapping.merge`'s docstring): the head, and the objects
    of the blocks read so far (``loaded``), in no particular order."""

    code: str
    crs_wkt: str
    pixel: float
    edges: list[float]  # the size bins the objects' rows were computed with
    block: float  # a block's side (campaign CRS units)
    scenes: list[Key]
    footprint_wkb: dict[str, bytes]  # scene id -> its footprint in the campaign CRS (WKB: decoded when needed)
    bounds: dict[str, tuple[float, float, float, float] | None]  # scene id -> bounds of its parts (campaign CRS)
    scene_blocks: dict[str, set[str]]  # scene id -> the blocks holding an object with a part in it
    blocks: dict[str, tuple[int, int]]  # block -> (CRC-32 of its arrays, objects in it)
    objects: list[MergedObject] = field(default_factory=list)
    loaded: set[str] = field(default_factory=set)

    def footprint(self, scene_id: str) -> Any:
        import shapely

        return shapely.from_wkb(self.footprint_wkb[scene_id])


def encode_block(objs: list[MergedObject]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A block's objects as arrays (module docstring of :mod:`~rtscore.mapping.merge_store`): exact (WKB, float64)."""
    import shapely

    rows = [o.row for o in objs]
    if any(r is None for r in rows):
        raise AssertionError("a block is written with every row computed")
    filled = [r for r in rows if r is not None]
    names = sorted({m[0] for o in objs for m in o.members})
    at = {n: i for i, n in enumerate(names)}
    bins = sorted({r.size_bin for r in filled if r.size_bin})
    bin_at = {b: i for i, b in enumerate(bins)}
    n = len(objs)
    wkbs = shapely.to_wkb(np.asarray([o.geometry for o in objs], dtype=object))
    texts = [json.dumps(list(r.scene_ids)).encode() for r in filled]
    arrays: dict[str, np.ndarray] = {
        "member_offsets": np.cumsum([0] + [len(o.members) for o in objs], dtype=np.int64),
        "member_scene": np.fromiter((at[m[0]] for o in objs for m in o.members), np.int32),
        "member_part": np.fromiter((m[1] for o in objs for m in o.members), np.int32),
        "wkb": np.frombuffer(b"".join(wkbs), np.uint8),
        "wkb_offsets": np.cumsum([0] + [len(w) for w in wkbs], dtype=np.int64),
        "area": shapely.area(np.asarray([o.geometry for o in objs], dtype=object)).astype(np.float64),
        "partial": np.fromiter((o.partial for o in objs), np.bool_, n),
        "cut": np.fromiter((o.cut for o in objs), np.bool_, n),
        "text": np.frombuffer(b"".join(texts), np.uint8),
        "text_offsets": np.cumsum([0] + [len(t) for t in texts], dtype=np.int64),
        "n_pixels": np.fromiter((r.n_pixels for r in filled), np.int64, n),
        "figures": np.fromiter(
            ((r.prob_mean, r.prob_max, r.area_m2, r.ground_area_m2, *r.bbox) for r in filled),
            np.dtype((np.float64, 8)),
            n,
        ).reshape(n, 8),
        "size_bin": np.fromiter((bin_at.get(r.size_bin, -1) for r in filled), np.int32, n),
    }
    return {"scenes": names, "size_bins": bins}, arrays


def decode_block(fields: dict[str, Any], a: dict[str, np.ndarray]) -> list[MergedObject]:
    import shapely

    names, bins = [str(v) for v in fields["scenes"]], [str(b) for b in fields["size_bins"]]
    mo, wo, to = a["member_offsets"].tolist(), a["wkb_offsets"].tolist(), a["text_offsets"].tolist()
    n = len(mo) - 1
    if any(len(a[k]) != n for k in ("partial", "cut", "area", "n_pixels", "size_bin", "figures")):
        raise ValueError("the object arrays differ in length")
    raw, text = a["wkb"].tobytes(), a["text"].tobytes()
    geoms = shapely.from_wkb(np.array([raw[wo[k] : wo[k + 1]] for k in range(n)], dtype=object)) if n else []
    scene, part, fig = a["member_scene"].tolist(), a["member_part"].tolist(), a["figures"].tolist()
    partial, cut, npx, sb = a["partial"].tolist(), a["cut"].tolist(), a["n_pixels"].tolist(), a["size_bin"].tolist()
    objects = []
    for k in range(n):
        f, g = fig[k], geoms[k]
        row = RtsObject(
            object_id=0,
            geometry=g,
            scene_ids=tuple(json.loads(text[to[k] : to[k + 1]])),
            n_pixels=npx[k],
            prob_mean=f[0],
            prob_max=f[1],
            area_m2=f[2],
            ground_area_m2=f[3],
            bbox=(f[4], f[5], f[6], f[7]),
            size_bin=bins[sb[k]] if sb[k] >= 0 else "",
            partial=partial[k],
        )
        members = [(names[scene[j]], part[j]) for j in range(mo[k], mo[k + 1])]
        objects.append(MergedObject(members, g, partial[k], cut[k], row))
    return objects


def block_table(
    names: list[str], held: dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]], pos: dict[str, int]
) -> ObjectTable:
    """The objects of blocks ``names`` (their arrays in ``held``, taken out as they are copied: the table is not
    built beside a second copy of every block) as one :class:`~rtscore.mapping.objects_layer.ObjectTable` in
    numbering order."""
    if not names:
        return ObjectTable.empty()
    bins = sorted({str(b) for n in names for b in held[n][0]["size_bins"]})
    bin_at = {b: i for i, b in enumerate(bins)}
    count = sum(len(held[n][1]["area"]) for n in names)
    wkb = np.empty(sum(len(held[n][1]["wkb"]) for n in names), np.uint8)
    text = np.empty(sum(len(held[n][1]["text"]) for n in names), np.uint8)
    starts, ends, tstarts, tends, first, part, n_pixels = (np.empty(count, np.int64) for _ in range(7))
    area, figures = np.empty(count), np.empty((count, 8))
    sbin, partial = np.empty(count, np.int32), np.empty(count, np.bool_)
    k = off = toff = 0
    for name in names:
        fields, a = held.pop(name)
        m, wo, to, mo = len(a["area"]), a["wkb_offsets"], a["text_offsets"], a["member_offsets"]
        places = np.asarray([pos[str(s)] for s in fields["scenes"]], np.int64)
        first[k : k + m] = places[a["member_scene"][mo[:-1]]]
        part[k : k + m] = a["member_part"][mo[:-1]]
        starts[k : k + m], ends[k : k + m] = wo[:-1] + off, wo[1:] + off
        tstarts[k : k + m], tends[k : k + m] = to[:-1] + toff, to[1:] + toff
        wkb[off : off + int(wo[-1])] = a["wkb"]
        text[toff : toff + int(to[-1])] = a["text"]
        local = np.asarray([bin_at[str(b)] for b in fields["size_bins"]] + [-1], np.int32)
        sbin[k : k + m] = local[a["size_bin"]]  # -1 indexes the appended -1
        area[k : k + m], n_pixels[k : k + m] = a["area"], a["n_pixels"]
        figures[k : k + m], partial[k : k + m] = a["figures"], a["partial"]
        k, off, toff = k + m, off + int(wo[-1]), toff + int(to[-1])
    order = np.lexsort((part, first, -area))
    return ObjectTable(
        wkb=wkb,
        starts=starts[order],
        ends=ends[order],
        text=text,
        tstarts=tstarts[order],
        tends=tends[order],
        n_pixels=n_pixels[order],
        figures=figures[order],
        size_bins=tuple(bins),
        size_bin=sbin[order],
        partial=partial[order],
    )


def write_state(path: Path, state: MergeState) -> None:
    """The head of ``state`` at ``path`` (module docstring of :mod:`~rtscore.mapping.merge_store`), written after
    its blocks."""
    ids = [k[0] for k in state.scenes]
    blocks = sorted(state.blocks)
    block_at = {b: i for i, b in enumerate(blocks)}
    fps = [state.footprint_wkb[s] for s in ids]
    bounds = [state.bounds.get(s) for s in ids]
    lists = [sorted(block_at[b] for b in state.scene_blocks.get(s, ())) for s in ids]
    fields = {
        "schema": STATE_SCHEMA,
        "code": state.code,
        "crs": state.crs_wkt,
        "pixel": state.pixel,
        "edges": state.edges,
        "block": state.block,
        "scenes": ids,
        "shas": [k[1] for k in state.scenes],
        "blocks": blocks,
        "block_crc": [state.blocks[b][0] for b in blocks],
        "block_objects": [state.blocks[b][1] for b in blocks],
    }
    arrays: dict[str, np.ndarray] = {
        "footprints": np.frombuffer(b"".join(fps), np.uint8),
        "footprint_offsets": np.cumsum([0] + [len(w) for w in fps], dtype=np.int64),
        "bounds": np.asarray([b if b is not None else (0.0, 0.0, 0.0, 0.0) for b in bounds], np.float64).reshape(-1, 4),
        "has_bounds": np.asarray([b is not None for b in bounds], np.bool_),
        "block_offsets": np.cumsum([0] + [len(x) for x in lists], dtype=np.int64),
        "block_index": np.asarray([i for x in lists for i in x], np.int32),
    }
    write_raw(path, fields, arrays)


def read_state(path: Path | None) -> MergeState | None:
    """The head of the merge state at ``path`` (no block read); None when there is none or it cannot be read (a
    warning: it is a cache)."""
    if path is None or not path.exists():
        return None
    try:
        if not path.is_file():
            raise ValueError("not a file")
        return state_of(*read_raw(path))
    except Exception as err:  # any damage: a full merge rebuilds it
        _log.warning("campaign merge state %s unreadable (%s: %s): full merge", path, type(err).__name__, err)
        return None


def state_of(f: dict[str, Any], a: dict[str, np.ndarray]) -> MergeState:
    if f.get("schema") != STATE_SCHEMA:
        raise ValueError(f"schema {f.get('schema')!r}, expected {STATE_SCHEMA}")
    ids, shas, blocks = [str(s) for s in f["scenes"]], [str(h) for h in f["shas"]], [str(b) for b in f["blocks"]]
    n = len(ids)
    fo, bo = a["footprint_offsets"].tolist(), a["block_offsets"].tolist()
    if len(shas) != n or len(fo) != n + 1 or len(bo) != n + 1 or len(a["bounds"]) != n:
        raise ValueError("the scene arrays differ in length")
    raw, bi = a["footprints"].tobytes(), a["block_index"].tolist()
    bounds, has = a["bounds"].tolist(), a["has_bounds"].tolist()
    return MergeState(
        code=str(f["code"]),
        crs_wkt=str(f["crs"]),
        pixel=float(f["pixel"]),
        edges=[float(e) for e in f["edges"]],
        block=float(f["block"]),
        scenes=list(zip(ids, shas, strict=True)),
        footprint_wkb={s: raw[fo[k] : fo[k + 1]] for k, s in enumerate(ids)},
        bounds={s: (_box(bounds[k]) if has[k] else None) for k, s in enumerate(ids)},
        scene_blocks={s: {blocks[bi[j]] for j in range(bo[k], bo[k + 1])} for k, s in enumerate(ids)},
        blocks={b: (int(c), int(m)) for b, c, m in zip(blocks, f["block_crc"], f["block_objects"], strict=True)},
    )


def _box(b: list[float]) -> tuple[float, float, float, float]:
    return float(b[0]), float(b[1]), float(b[2]), float(b[3])
