"""Write tile stores from any tile producer: bounded memory, whole shards per worker, resumable, atomic."""

from __future__ import annotations

import logging
import multiprocessing
import shutil
from collections.abc import Iterator
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from rtscore import __version__
from rtscore.config.binding import RasterContract
from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import FORMAT, FORMAT_VERSION, StoreLayout, TileStoreError
from rtscore.data.store.shards import ShardWriter, completed_shards, create_staging, finalize, staging_attrs
from rtscore.data.tiles import PIXEL_SIZE_M, RawTile
from rtscore.identity import SET_ASIDE_DIR, set_aside
from rtscore.identity import resume_key as identity_resume_key

SYNTHETIC_CRS = "EPSG:3857"  # the CRS rts synth-geotiff writes synthetic scenes in
_log = logging.getLogger(__name__)


class TileProducer(Protocol):
    """Produces stored tiles ``[start, stop)`` in batches; picklable so worker processes can run it."""

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]: ...


def _versions() -> dict[str, str]:
    import numpy
    import zarr

    return {"rtscore": __version__, "zarr": zarr.__version__, "numpy": numpy.__version__}


def _write_shard(producer: TileProducer, staging: Path, layout: StoreLayout, shard: int) -> int:
    """Produce and write one whole shard; memory is one shard buffer plus one batch."""
    writer = ShardWriter(staging, layout, shard)
    for tiles, codes in producer.batches(writer.start, writer.stop):
        writer.add(tiles, codes)
    writer.write()
    return writer.stop - writer.start


def staging_path(output: Path) -> Path:
    return output.with_name(f".{output.name}.partial")


def write_store(
    producer: TileProducer,
    layout: StoreLayout,
    output: Path,
    store_attrs: dict[str, Any],
    *,
    num_workers: int = 1,
    overwrite: bool = False,
    restart: bool = False,
    progress: bool = False,
    resume_key: str | None = None,
) -> StoreAttrs:
    """Write all shards (resuming an interrupted run of the same identity) and publish the store atomically.

    ``resume_key`` is the identity of the work: the code that renders the tiles, their config and every input
    read (a data root's listing). Shards staged under another identity are never completed: they are set aside
    (:func:`rtscore.identity.set_aside`, under ``set_aside/`` beside the store) and the store is written anew.
    Without a ``resume_key`` the store's ``config_hash`` and the writer's own code identity stand for it.
    """
    output = Path(output)
    if output.exists() and not overwrite:
        raise TileStoreError(f"output {output} already exists; pass overwrite (--overwrite) to replace it")
    staging = staging_path(output)
    fingerprint = resume_key or identity_resume_key(__name__, store_attrs["config_hash"])
    store_attrs = {**store_attrs, "format_version": layout.format_version}
    _prepare_staging(staging, output, layout, fingerprint, restart=restart)
    todo = sorted(set(range(layout.n_shards)) - completed_shards(staging))
    bar = _progress_bar(progress, layout, todo, output)
    try:
        _write_shards(producer, staging, layout, todo, num_workers, bar)
    finally:
        bar(None)
    return finalize(staging, output, store_attrs)


def _prepare_staging(staging: Path, output: Path, layout: StoreLayout, fingerprint: str, *, restart: bool) -> None:
    """The staging store to write into: the interrupted one when it is of the same layout and identity (its
    completed shards are kept), else a new one (another identity's shards set aside, an old layout's discarded)."""
    existing = staging_attrs(staging)
    staged_version = int(existing.get("format_version", 1)) if existing is not None else layout.format_version
    old_layout = staged_version != layout.format_version
    if old_layout:
        # Shards staged in another store layout (an older rtscore) cannot be completed in this one.
        _log.warning(
            f"discarding the interrupted generation staged at {staging}: its shards are in store format "
            f"{staged_version}, this run writes format {layout.format_version}"
        )
    if staging.exists() and (restart or existing is None or old_layout):
        shutil.rmtree(staging)
    elif existing is not None and existing.get("resume_key") != fingerprint:
        set_aside(
            [staging],
            output.parent / SET_ASIDE_DIR,
            base=output.parent,
            what=f"the interrupted generation of {output.name} staged at {staging}",
            why=f"was written by other code, config or inputs (resume key {str(existing.get('resume_key'))[:12]} "
            f"vs {fingerprint[:12]})",
        )
    if not staging.exists():
        create_staging(staging, layout, {"resume_key": fingerprint, "n_shards": layout.n_shards})


def _write_shards(
    producer: TileProducer, staging: Path, layout: StoreLayout, todo: list[int], num_workers: int, bar: Any
) -> None:
    """Write the shards ``todo``: in this process, or in spawned worker processes (a worker's error re-raised
    once it arrives; the shards finished before it stay done)."""
    if num_workers <= 1 or len(todo) <= 1:
        for shard in todo:
            bar(_write_shard(producer, staging, layout, shard))
        return
    ctx = multiprocessing.get_context("spawn")  # safe inside threaded callers (Prefect)
    with ProcessPoolExecutor(max_workers=min(num_workers, len(todo)), mp_context=ctx) as pool:
        futures = [pool.submit(_write_shard, producer, staging, layout, s) for s in todo]
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for fut in done:
                bar(fut.result())


def _progress_bar(enabled: bool, layout: StoreLayout, todo: list[int], output: Path) -> Any:
    if not enabled:
        return lambda n: None
    from tqdm import tqdm

    total = sum(b - a for a, b in map(layout.shard_range, todo))
    skipped = layout.n_tiles - total
    bar = tqdm(total=layout.n_tiles, initial=skipped, unit="tile", desc=f"generate {output.name}")

    def update(n: int | None) -> None:
        if n is None:
            bar.close()
        else:
            bar.update(n)

    return update


def base_attrs(
    *,
    split: str,
    source: str,
    tile_size: int,
    extra: list[str],
    mask_types: list[str],
    dataset_version: str,
    scale: float = 1.0,
    pixel_size_m: float | None = None,
) -> dict[str, Any]:
    """Attributes every store records; ``scale`` is the ground-sampling scale (0.5: 2x field of view).

    ``pixel_size_m``: the tiles' pixel size in their CRS units (a GeoTIFF store: the data's, from the raster
    contract); None: the synthetic scenes' nominal ``4.77 / scale`` m, and the store's ``raster_contract`` is
    theirs (EPSG:3857 at that size, as ``rts synth-geotiff`` writes them). Ground areas are per tile
    (``meta/pixel_area_m2``), not derived from this."""
    nominal = PIXEL_SIZE_M / scale
    attrs = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "split": split,
        "source": source,
        "dataset_version": dataset_version,
        "tile_size": tile_size,
        "scale": float(scale),
        "pixel_size_m": nominal if pixel_size_m is None else float(pixel_size_m),
        "channel_names": ["R", "G", "B", *extra],
        "extra_channel_names": list(extra),
        "mask_types": mask_types,
        "versions": _versions(),
    }
    if pixel_size_m is None:
        attrs["raster_contract"] = RasterContract(crs=SYNTHETIC_CRS, pixel_size=nominal).model_dump(mode="json")
    return attrs
