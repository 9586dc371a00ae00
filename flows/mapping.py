"""The mapping flows: ``map-region`` (a campaign) and ``map-chunk`` (one chunk of its scenes), docs/mapping.md.

``map-region`` runs on the CPU pool: it lists the scenes, checks drift on a sample and splits the list into chunks
(:func:`rtscore.mapping.campaign.prepare_campaign`). ``execution: local`` maps the chunks in this flow run, one after
the other; ``execution: distributed`` starts one ``map-chunk`` flow run per chunk on the GPU pool through the shared
fan-out (flows/fanout.py: idempotency key per (map-region flow run, chunk, attempt), a crashed run re-submitted).
Either way the scene records go to the campaign's manifest-log, and this run then builds the campaign's objects,
footprint index and summary from the log (:func:`~rtscore.mapping.campaign.finish_campaign`) and publishes the
summary (markdown artifact ``map-region-summary``) and the scene counts by status (table ``map-region-scenes``).

``map-chunk`` loads the package and maps the scenes map-region handed over (URI, identity, EXTRA raster, the time
of each one's latest log record: :class:`flows.params.mapping.PlannedScene`) without listing the input or reading the
other chunks' log files (:func:`rtscore.mapping.handover.run_planned_chunk`): it skips what an earlier run of the same
chunk logged since the plan (a re-submitted or retried chunk run), checks each scene left against its planned
identity on the worker (a scene changed since is a ``failed`` record naming the change) and maps the rest. A scene
that fails is a ``failed`` record, not a failed run. A run started by hand without ``scenes`` lists the input and
reads the whole log instead. A worker whose mapping identity (package, mapping code, settings) is not the
campaign's refuses the chunk before mapping anything.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from flows import ui
from flows.common import flow_run_scope, run_name, run_namer
from flows.failures import flow
from flows.fanout import Child, FanOutError, absolute, fan_out
from flows.params import derived
from flows.params.mapping import MapChunkParams, MapRegionParams, PlannedScene
from flows.ui import create_markdown_artifact
from rtscore.inference.predict import load_package
from rtscore.mapping.campaign import (
    CampaignPlan,
    CampaignResult,
    drop_extra_siblings,
    finish_campaign,
    mapping_identity,
    prepare_campaign,
    render_summary,
    run_chunk,
    run_chunks_here,
)
from rtscore.mapping.campaign_log import CampaignLog
from rtscore.mapping.handover import ChunkTodo, chunk_of, run_planned_chunk, todo_chunks
from rtscore.mapping.scenes import CampaignError, CompanionInput, InputIdentity, Scene, list_scenes

MAP_CHUNK = "map-chunk"  # the fan-out's stage name (part of every chunk run's idempotency key)
SUMMARY_KEY = "map-region-summary"
SCENES_KEY = "map-region-scenes"
CHUNK_NAME = ("chunk",)  # a chunk run's name: map-chunk-<k>


@flow(name=MAP_CHUNK, flow_run_name=run_namer(MAP_CHUNK, MapChunkParams, CHUNK_NAME))
def map_chunk(params: MapChunkParams) -> dict[str, int]:
    """Map one chunk of a campaign: the scenes ``scene_ids`` as map-region handed them over in ``scenes`` (listed
    from ``input`` when none were) not yet done with this scene identity and mapping identity; one log record each.
    Returns the number of records appended by status."""
    with flow_run_scope():
        pkg = load_package(params.package, device=params.device)
        identity = mapping_identity(pkg)
        what = f"map-chunk {params.chunk}"
        if params.mapping_identity is not None and params.mapping_identity != identity.digest():
            raise CampaignError(
                f"{what}: this worker maps under identity {identity.digest()[:12]} ({identity.short()}), the "
                f"campaign under {params.mapping_identity[:12]}: another package or code version on this worker; "
                "deploy the campaign's package and code on every worker"
            )
        writer = CampaignLog(params.output).writer(params.chunk)
        todo = handed_over(params)
        if todo is None:  # started by hand, no plan: find the scenes as map-region would, resume from the whole log
            listed = list_scenes(params.input, extra=bool(pkg.binding.extra_bands))
            scenes = chunk_of(drop_extra_siblings(listed), params.scene_ids, what=what)
            records = run_chunk(pkg, scenes, params.output, writer, identity=identity)
        else:
            records = run_planned_chunk(pkg, todo, params.output, writer, identity)
        counts: dict[str, int] = {}
        for r in records:
            counts[r.status] = counts.get(r.status, 0) + 1
        return counts


@flow(name="map-region", flow_run_name=run_namer("map-region", MapRegionParams, ("output",)))
def map_region(params: MapRegionParams) -> CampaignResult:
    """Drift check, scene list and chunks here; the chunks in this run (local) or as map-chunk runs on the GPU pool
    (distributed); then objects, footprint index and summary from the log. Returns the summary."""
    with flow_run_scope() as flow_run_id:
        return region(params, flow_run_id)


def region(params: MapRegionParams, flow_run_id: str | None) -> CampaignResult:
    """The body of :func:`map_region` (``flow_run_id`` keys the chunk runs of a distributed campaign)."""
    plan = prepare_campaign(
        params.package,
        params.input,
        params.output,
        params.chunk_size,
        allow_drift=params.allow_drift,
        # distributed: this run (CPU pool) only checks drift; the chunk runs use `device` on the GPU pool
        device=params.device if params.execution == "local" else "cpu",
    )
    started = time.perf_counter()
    failure: FanOutError | None = None
    if params.execution == "distributed":
        if flow_run_id is None:
            raise RuntimeError("execution 'distributed' needs a Prefect flow run (its id keys the chunk runs)")
        try:
            fan_out(
                MAP_CHUNK,
                params.distributed.deployment,
                flow_run_id,
                chunk_children(params, plan),
                params.distributed,
                tags=["rts-map"],
            )
        except FanOutError as err:  # what the other chunks mapped is summarized first, then the run fails
            failure = err
    else:
        run_chunks_here(plan)
    summary = finish_campaign(plan, time.perf_counter() - started)
    publish_campaign(summary)
    if failure is not None:
        raise failure
    return summary


def chunk_children(params: MapRegionParams, plan: CampaignPlan) -> list[Child]:
    """One map-chunk run per chunk with scenes left to map (:func:`~rtscore.mapping.handover.todo_chunks`), its
    parameters derived from the campaign's (every field they share: package, input, output, device; paths absolute:
    the workers may start elsewhere) and the chunk's scenes handed over as planned (:class:`PlannedScene`)."""
    located = {"package": absolute(params.package), "input": absolute(params.input), "output": absolute(params.output)}
    children = []
    for todo in todo_chunks(plan.chunks, plan.records, plan.identity):
        k = todo.index
        child = derived(
            MapChunkParams,
            params,
            **located,
            chunk=k,
            scene_ids=[s.scene_id for s in todo.scenes],
            scenes=[planned_scene(s, todo.logged.get(s.scene_id)) for s in todo.scenes],
            mapping_identity=plan.identity.digest(),
        )
        children.append(Child(str(k), f"chunk {k}", run_name(MAP_CHUNK, child, CHUNK_NAME), child))
    return children


def planned_scene(scene: Scene, logged: datetime | None) -> PlannedScene:
    """``scene`` as a chunk run's parameter: its URI, identity and companions, and its latest record's time."""
    return PlannedScene.model_validate(
        {
            "scene_id": scene.scene_id,
            "uri": scene.uri,
            "identity": scene.identity.model_dump(),
            "companions": [c.model_dump() for c in scene.companions],
            "logged": logged,
        }
    )


def handed_over(params: MapChunkParams) -> ChunkTodo | None:
    """The scenes ``scene_ids`` of a chunk run as map-region handed them over, in the library's types (so that their
    identities compare equal to the log's); None: none handed over (a run started by hand)."""
    if not params.scenes:
        return None
    by_id = {s.scene_id: s for s in params.scenes}
    scenes, logged = [], {}
    for scene_id in params.scene_ids:
        p = by_id[scene_id]
        companions = tuple(CompanionInput.model_validate(c.model_dump()) for c in p.companions)
        scenes.append(Scene(p.scene_id, p.uri, InputIdentity.model_validate(p.identity.model_dump()), companions))
        if p.logged is not None:
            logged[scene_id] = p.logged
    return ChunkTodo(params.chunk, scenes, logged)


def publish_campaign(summary: CampaignResult) -> None:
    """The summary as a markdown artifact and the scenes by status as a table, in a flow run (the body called
    directly publishes nothing); never fails the campaign."""
    if not ui.in_a_run():
        return
    rows = [
        {"status": status, "scenes": getattr(summary, field)}
        for status, field in (
            ("done", "done"),
            ("skipped-full-nodata", "skipped_full_nodata"),
            ("failed", "failed"),
            ("pending", "pending"),
        )
    ]
    try:
        create_markdown_artifact(
            key=SUMMARY_KEY, markdown=render_summary(summary), description="Mapping campaign summary"
        )
        ui.publish_table(SCENES_KEY, rows, "Mapping campaign: scenes by status (latest record of each scene)")
    except Exception as err:  # a summary never fails a stage (e.g. outside a flow run)
        logging.getLogger(__name__).warning(f"could not publish the campaign summary: {err}")
