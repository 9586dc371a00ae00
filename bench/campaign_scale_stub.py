"""The stub ``map-chunk`` flow of bench/campaign_scale.py's Prefect fan-out (issue 37): no package, no model.

A chunk run appends one ``done`` record per scene of its chunk to the campaign's manifest-log, through the log's own
writer (``log/chunk-<k>-<flow run id>.jsonl``, as ``map-chunk`` does), without looking at the log first: a chunk run
started twice leaves two records of its scenes, so the log tells afterwards whether any scene was done twice.
Kept in its own module: every flow run imports it, and it imports nothing heavy.
"""

from prefect import flow
from pydantic import Field

from flows.common import flow_run_scope
from flows.form import FormModel

STUB_FLOW = "map-chunk-stub"
STUB_DEPLOYMENT = "bench"


class StubChunkParams(FormModel):
    """One chunk of the simulated campaign."""

    output: str = Field(..., description="The campaign's output root (its log/ is appended to).")
    chunk: int = Field(..., ge=0, description="Chunk index (names the chunk's log file).")
    scene_ids: list[str] = Field(..., min_length=1, description="The chunk's scenes.")
    identity: str = Field(..., description="The MapIdentity the records carry, as JSON.")


@flow(name=STUB_FLOW)
def map_chunk_stub(params: StubChunkParams) -> int:
    """Append a ``done`` record for each scene of the chunk. Returns how many."""
    from rtscore.mapping.campaign_log import CampaignLog, MapIdentity, SceneRecord
    from rtscore.mapping.scenes import InputIdentity, Scene

    with flow_run_scope():
        identity = MapIdentity.model_validate_json(params.identity)
        writer = CampaignLog(params.output).writer(params.chunk)
        for sid in params.scene_ids:
            scene = Scene(sid, f"gs://bench/input/{sid}.tif", InputIdentity(generation=1, size=1))
            writer.append(SceneRecord.now(scene, identity, "done", windows=64, valid_pixels=4096 * 4096))
        return len(params.scene_ids)
