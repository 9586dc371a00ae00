"""The campaign's objects in the cells a round cuts that no label covers: 255 (ignore) there, not background.

Ingest cuts the grid cells of the objects it adds (confirmed, hard negatives). Another object the campaign found in
such a cell has no label of its own: judged unsure, left out in a val/test region (``--held-out skip``), or not
judged at all. Labelled 0 it would be a false negative the model is taught, so each is written to ``areas.gpkg`` as
an ignore area (``focus.ignore_column``): 255 over its extent in the cells the judged objects cut, and nothing
elsewhere (a cell away from them, a parent tile among them, keeps its bytes).

Not an ignore area: an object that overlaps a polygon of the round's inventory (labelled there already) or an earlier
round's area (judged then, or already ignored). An earlier round's ignore area carries over until a judged object of a
later round overlaps it: then that verdict labels it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtscore.config.tiling import TilingConfig
from rtscore.mapping.campaign import OBJECTS_FILE
from rtscore.mapping.outputs import CampaignRoot
from rtscore.review.manifest import ReviewError
from rtscore.review.placement import Plan
from rtscore.review.regions import grid_geometry
from rtscore.review.review_inputs import ReviewInputs
from rtscore.review.round_files import AREA_IGNORE, is_ignore_area

NOT_JUDGED = "not_judged"  # the outcome of an object no verdict names (not exported, or exported and not judged)


def left_out_areas(plan: Plan, src: ReviewInputs, cfg: TilingConfig) -> list[tuple[dict[str, Any], Any]]:
    """The ignore areas of the next round (properties, grid-CRS geometry): the earlier rounds' still unjudged, then
    this round's (the campaign's objects in the cells it cuts, module docstring), in object id order."""
    import shapely

    included = {p.obj.object_id: p.geom for p in plan.objects if p.included}
    judged = shapely.STRtree(list(included.values()))
    earlier = [(dict(f["properties"]), shapely.geometry.shape(f["geometry"])) for f in plan.earlier_areas]
    judged_before = [g for props, g in earlier if not is_ignore_area(props)]
    carried = [(props, g) for props, g in earlier if is_ignore_area(props) and not len(judged.query(g, "intersects"))]
    if not included:
        return carried
    cells = shapely.STRtree([shapely.box(*c.bounds) for p in plan.objects if p.included for c in p.cells])
    known = shapely.STRtree([*plan.inventory.geoms, *judged_before, *(g for _, g in carried)])
    outcomes = {p.obj.object_id: p for p in plan.objects if p.outcome is not None}
    fresh = []
    for oid, geom in _campaign_objects(src, cfg, cells):
        if oid in included or len(known.query(geom, "intersects")):
            continue
        props = {"object_id": oid, "verdict": "", "outcome": NOT_JUDGED, "review_id": src.header.review_id}
        if oid in outcomes:
            p = outcomes[oid]
            props.update(verdict=p.verdict.verdict, outcome=str(p.outcome.outcome if p.outcome else NOT_JUDGED))
        fresh.append(({**props, AREA_IGNORE: 1}, geom))
    return carried + fresh


def _campaign_objects(src: ReviewInputs, cfg: TilingConfig, cells: Any) -> list[tuple[int, Any]]:
    """The objects of the campaign's layer touching a cell of ``cells`` (an STRtree of grid-CRS boxes): id and
    outline on the grid CRS, by id. The layer is read through its spatial index, one bounding box per cluster of
    touching cells, never whole: a pan-Arctic review's cells are scattered, and one box around them all would read
    every object."""
    import pyogrio
    import shapely
    from rasterio.crs import CRS
    from rasterio.warp import transform_bounds

    root = CampaignRoot(src.campaign)
    path = root.fetch(OBJECTS_FILE) or Path(root.path(OBJECTS_FILE))
    crs = CRS.from_wkt(src.header.campaign.crs_wkt)
    clusters = shapely.get_parts(shapely.union_all(list(cells.geometries)))
    found: dict[int, bytes] = {}
    for cluster in clusters:
        bbox = transform_bounds(cfg.grid.crs, crs, *cluster.bounds, densify_pts=21)
        try:
            _, _, wkbs, fields = pyogrio.raw.read(path, columns=["object_id"], bbox=bbox)
        except Exception as err:  # pyogrio's DataSourceError/FieldError: GDAL's reason inside
            why = f"{type(err).__name__}: {err}"
            raise ReviewError(f"{root.uri_of(OBJECTS_FILE)}: objects layer unreadable ({why})") from None
        found.update(zip((int(v) for v in fields[0].tolist()), wkbs, strict=True))
    out = []
    for oid, wkb in sorted(found.items()):
        geom = grid_geometry(shapely.from_wkb(wkb), crs, cfg.grid.crs)
        if len(cells.query(geom, "intersects")):
            out.append((int(oid), geom))
    return out
