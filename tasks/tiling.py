"""The tile-scenes task: `rts tile` as a Prefect task, a thin call into `rtscore.data.tiling.run`.

Not a cached run-directory stage: its output is a data root (an input of the pipeline, outside any run), and the
library resumes a killed run tile by tile itself, so a retry of the flow redoes only unfinished tiles.
"""

from __future__ import annotations

from prefect import task

from rtscore.config.tiling import load_tiling_config
from rtscore.data.tiling.run import TilingError, TilingManifest, tile_scenes


@task(name="tile-scenes", task_run_name="tile-scenes-{config}")
def tile(config: str, output: str | None = None, overwrite: bool = False) -> TilingManifest:
    """Cut the scenes and polygons of the tiling config ``config`` into the tile layout under ``output`` (default:
    the config's ``output``)."""
    cfg = load_tiling_config(config)
    target = output or cfg.output
    if not target:
        raise TilingError(f"{config}: no output; set output in the config or the flow's output parameter")
    return tile_scenes(cfg, target, overwrite=overwrite)
