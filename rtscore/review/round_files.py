"""The next round's inputs an ingest writes under ``<output>/review/``: the grown inventory, the judged objects'
areas, a copy of the verdict file, the tiling config (``focus``, ``lineage``) and the retargeted pipeline config."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from rtscore.config.base import read_yaml
from rtscore.config.pipeline import parse_pipeline_config
from rtscore.config.tiling import TilingConfig, relative_paths
from rtscore.data.geotiff.root import METADATA_CSV, SPLITS_YAML
from rtscore.data.inventory.object_pixels import join_ids
from rtscore.data.inventory.reader import InventoryFeature, canonical_mapping, canonical_values
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.data.tiling.inventory import ignore_flag
from rtscore.review.manifest import ReviewError
from rtscore.review.placement import Plan

REVIEW_DIR = "review"  # <output>/review/: what the round was made from
INGEST_JSON = "ingest.json"
INVENTORY_FILE = "inventory.gpkg"
AREAS_FILE = "areas.gpkg"
TILE_YAML = "tile.yaml"
PIPELINE_YAML = "pipeline.yaml"
OWN_FILES = (INGEST_JSON, INVENTORY_FILE, AREAS_FILE, TILE_YAML, PIPELINE_YAML)
DEFAULT_ID_COLUMN = "uid"  # the id column of inventory.gpkg when the round's inventory has none
GROUP_COLUMN = "region_group"  # regions.groups: each polygon's group, read back as a region column (names kept)


def copy_verdicts(path: Path, review_dir: Path) -> str:
    name = path.name if path.name not in OWN_FILES else f"verdicts-{path.name}"
    tmp = review_dir / f".{name}.tmp"
    shutil.copyfile(path, tmp)
    tmp.replace(review_dir / name)
    return name


def _write_layer(path: Path, geoms: list[Any], columns: dict[str, Any], crs: str) -> None:
    """One MultiPolygon layer (pyogrio raw: geopandas is not a dependency), under a temporary name."""
    import numpy as np
    import pyogrio
    import shapely

    multi = [g if g.geom_type == "MultiPolygon" else shapely.MultiPolygon([g]) for g in _polygonal(geoms)]
    tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
    try:
        pyogrio.raw.write(
            tmp,
            geometry=np.asarray([shapely.to_wkb(g) for g in multi], dtype=object),
            field_data=list(columns.values()),
            fields=list(columns),
            crs=crs,
            driver="GPKG",
            layer=path.stem,
            geometry_type="MultiPolygon",
            encoding="UTF-8",
        )
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def _polygonal(geoms: list[Any]) -> list[Any]:
    """Each geometry's polygons (make_valid can leave a collection with lines)."""
    import shapely

    out = []
    for g in geoms:
        if g.geom_type in ("Polygon", "MultiPolygon"):
            out.append(g)
            continue
        parts = [p for p in getattr(g, "geoms", []) if p.geom_type in ("Polygon", "MultiPolygon")]
        out.append(shapely.union_all(parts) if parts else g)
    return out


def write_inventory(path: Path, plan: Plan, cfg: TilingConfig, rid: str) -> None:
    """inventory.gpkg: the round's polygons (their geometry as read on the grid CRS, id, region column or group,
    class, label type and date in the reader's canonical columns, the ignore flag when present) and one polygon per
    confirmed object (a Positive outline without date; ``inventory_uids``: the inventory polygons the review manifest
    said it overlaps, so a re-found known slump names the feature it re-found)."""
    import numpy as np
    import shapely

    inv = plan.inventory
    confirmed = [p for p in plan.objects if p.outcome is not None and p.outcome.outcome == "confirmed"]
    geoms = [shapely.geometry.shape(f["geometry"]) for f in inv.features] + [p.geom for p in confirmed]
    n_old = len(inv.features)
    new_ids = [str(p.outcome.uid) for p in confirmed if p.outcome]
    columns: dict[str, Any] = {
        cfg.polygons.id_column or DEFAULT_ID_COLUMN: np.array([*inv.uids, *new_ids], dtype=object)
    }
    region_column = cfg.regions.column or (GROUP_COLUMN if cfg.regions.groups is not None else None)
    if region_column is not None and inv.regions is not None:
        regions = [*inv.regions, *(str(p.outcome.region) for p in confirmed if p.outcome)]
        columns[region_column] = np.array(regions, dtype=object)
    added = [InventoryFeature(u, n_old + k, "positive", "polygon", None, None, None) for k, u in enumerate(new_ids)]
    for name, values in canonical_values([*inv.labels, *added]).items():
        columns[name] = np.array(values, dtype=object)
    if any("ignore" in (f.get("properties") or {}) for f in inv.features):
        flags = [int(bool((f.get("properties") or {}).get("ignore", False))) for f in inv.features]
        columns["ignore"] = np.array(flags + [0] * len(confirmed), dtype=np.int64)
    columns["review_status"] = np.array(["inventory"] * n_old + ["confirmed"] * len(confirmed), dtype=object)
    columns["review_id"] = np.array([""] * n_old + [rid] * len(confirmed), dtype=object)
    columns["object_id"] = np.array([0] * n_old + [p.obj.object_id for p in confirmed], dtype=np.int64)
    overlaps = [join_ids(p.outcome.inventory_uids) for p in confirmed if p.outcome]
    earlier = [str((f.get("properties") or {}).get("inventory_uids") or "") for f in inv.features]  # earlier rounds'
    columns["inventory_uids"] = np.array(earlier + overlaps, dtype=object)  # the manifest's ids, back
    _write_layer(path, geoms, columns, cfg.grid.crs)


AREA_TEXT = ("verdict", "outcome", "region", "split", "review_id", "scene")
AREA_IGNORE = "ignore"  # areas.gpkg: 1 on an area that cuts no cell and is 255 in the cells the others cut
AREA_SCENE = "scene"  # areas.gpkg: the file name of the scene each area is cut from (focus.scene_column)


def is_ignore_area(props: dict[str, Any] | None) -> bool:
    """Whether an area of ``areas.gpkg`` (its properties) is an ignore area (``AREA_IGNORE`` set)."""
    return ignore_flag((props or {}).get(AREA_IGNORE))


def write_areas(path: Path, plan: Plan, crs: str, rid: str) -> None:
    """areas.gpkg, the focus of the added scenes: the judged objects added (confirmed and false positives) with
    verdict, region, split, review and the file name of the scene they are cut from (each focus scene is cut only
    around its own areas: a scene added later never fills an earlier round's cells), after the areas of the round's
    own focus (an earlier ingest's; blank scene when written before the column was)."""
    import numpy as np
    import shapely

    rows = [
        (dict(f["properties"]), shapely.geometry.shape(f["geometry"]))
        for f in plan.earlier_areas
        if not is_ignore_area(f.get("properties"))  # those still unjudged are in plan.ignore_areas
    ]
    for p in plan.objects:
        if p.included and p.outcome is not None:
            o = p.outcome
            props = {"object_id": o.object_id, "verdict": o.verdict, "outcome": o.outcome, "region": o.region}
            props.update(split=o.split, review_id=rid, **{AREA_SCENE: p.scene.name if p.scene else ""})
            rows.append((props, p.geom))
    rows += plan.ignore_areas
    columns = {
        "object_id": np.array([int(r.get("object_id") or 0) for r, _ in rows], dtype=np.int64),
        **{k: np.array([str(r.get(k) or "") for r, _ in rows], dtype=object) for k in AREA_TEXT},
        AREA_IGNORE: np.array([int(r.get(AREA_IGNORE) or 0) for r, _ in rows], dtype=np.int64),
    }
    _write_layer(path, [g for _, g in rows], columns, crs)


def next_tiling_config(cfg: TilingConfig, plan: Plan, lineage: dict[str, Any]) -> str:
    """The next round's tiling config (paths absolute but its own files, beside it; output the root above)."""
    import yaml

    doc = cfg.model_dump(mode="json", exclude_none=True)
    doc["polygons"] = {
        "path": INVENTORY_FILE,
        "id_column": cfg.polygons.id_column or DEFAULT_ID_COLUMN,
        "schema": "mapped",  # the canonical columns write_inventory wrote: the same labels next round
        "columns": canonical_mapping(),
        "max_label_age_days": cfg.polygons.max_label_age_days,
        "stale_labels": cfg.polygons.stale_labels,
    }
    if cfg.regions.groups is not None:  # the groups as named this round: a confirmed polygon cannot rename them
        doc["regions"] = {"column": GROUP_COLUMN}
    doc["scenes"] = [*cfg.scenes, *plan.added_scenes]
    doc.pop("focus", None)
    if plan.focus_scenes or plan.ignore_areas:
        focus = {"path": AREAS_FILE, "scenes": plan.focus_scenes, "scene_column": AREA_SCENE}
        doc["focus"] = {**focus, "ignore_column": AREA_IGNORE}
    doc["splits"] = plan.splits
    doc["output"] = ".."
    doc["lineage"] = lineage
    return yaml.safe_dump(doc, sort_keys=False)


def pipeline_doc(path: Path, out: Path) -> str:
    """The pipeline config with every geotiff generation config's data_root at ``out`` (relative to
    ``<out>/review/pipeline.yaml``), generation configs named by path inlined; validated before anything is written.
    """
    import yaml

    data = read_yaml(path)
    if not isinstance(data, dict):
        raise ReviewError(f"{path}: a pipeline config is a mapping")
    base = path.resolve().parent
    review_dir = out / REVIEW_DIR
    gen = dict((data.get("data") or {}).get("generation") or {})
    pointed = 0
    for split in ("train", "val", "test"):
        v = gen.get(split)
        if isinstance(v, str):
            v = read_yaml(base / v)
        if isinstance(v, dict) and isinstance(v.get("geotiff"), dict):
            v = {**v, "geotiff": {**v["geotiff"], "data_root": os.path.relpath(out, review_dir)}}
            pointed += 1
        if v is not None:
            gen[split] = v
    if not pointed:
        raise ReviewError(f"{path}: no generation config of source geotiff: no data_root to point at {out}")
    data = {**data, "data": {**(data.get("data") or {}), "generation": gen}}
    parse_pipeline_config(data, review_dir)
    return yaml.safe_dump(data, sort_keys=False)


def portable_tiling_config(text: str, review_dir: Path) -> str:
    """The round's tiling config (:func:`next_tiling_config`'s YAML) with every path it names relative to
    ``review_dir``, where it is written: scenes, focus, the lineage's parent, regions and companion rasters. The round
    directory then moves (or is copied) with what lies beside it and still reads the same files."""
    import yaml

    cfg = relative_paths(TilingConfig.model_validate(yaml.safe_load(text)), review_dir)
    return yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True), sort_keys=False)


def same_tiles(parent: Path, root: Path) -> bool:
    """Whether the data root ``root`` holds the tiles of ``parent``, byte for byte: the same ``metadata.csv`` and
    ``splits.yaml``, the same files under ``PLANET-RGB/``, ``EXTRA/`` and ``labels/`` with the same bytes. Then a
    round adds nothing a model trains on (training on it repeats the parent's run). The cheap differences (the
    metadata, the names and sizes of the files) are looked at before any tile is read."""
    import filecmp

    for name in (METADATA_CSV, SPLITS_YAML):
        was, now = parent / name, root / name
        if was.exists() != now.exists() or (was.exists() and not filecmp.cmp(was, now, shallow=False)):
            return False
    pairs: list[tuple[Path, Path]] = []
    for sub in (RGB_DIR, EXTRA_DIR, LABEL_DIR):
        before, after = _tile_files(parent / sub), _tile_files(root / sub)
        if {k: p.stat().st_size for k, p in before.items()} != {k: p.stat().st_size for k, p in after.items()}:
            return False
        pairs += [(before[k], after[k]) for k in sorted(before)]
    return all(filecmp.cmp(was, now, shallow=False) for was, now in pairs)


def _tile_files(folder: Path) -> dict[str, Path]:
    """The files of a tile folder by name (none when it is absent; hidden partial files left out)."""
    if not folder.is_dir():
        return {}
    return {p.name: p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")}
