"""A local copy of what ingesting one split needs from a ``gs://`` data root."""

from __future__ import annotations

from pathlib import Path

from rtscore.data.geotiff.root import METADATA_CSV, SPLITS_YAML, GeotiffError, read_metadata, read_splits
from rtscore.data.raster.bands import EXTRA_DIR, LABEL_DIR, RGB_DIR
from rtscore.storage import default_cache_dir
from rtscore.storage.gcs import GcsStore, RetryPolicy, parse_gs_uri, transfer_workers


def stage_data_root(uri: str, split: str, cache_dir: Path | None = None) -> Path:
    """A local copy of what ingesting ``split`` needs from a ``gs://`` data root: metadata.csv, splits.yaml (when
    there is one) and the files of the split's tiles, downloaded in parallel into the cache (files already
    there with the object's size are kept). Without splits.yaml every tile is fetched (the split is derived
    locally, next to the copy)."""
    bucket, prefix = parse_gs_uri(uri)
    store = GcsStore(bucket, prefix, RetryPolicy.from_env(), workers=transfer_workers())
    local = (cache_dir or default_cache_dir()) / "gcs-data" / bucket / prefix
    local.mkdir(parents=True, exist_ok=True)
    for name in (METADATA_CSV, SPLITS_YAML):
        got = store.read(name)
        if got is None:
            if name == METADATA_CSV:
                raise GeotiffError(f"{uri}/{name} not found (the data root needs metadata.csv)")
            continue
        (local / name).write_bytes(got[0])
    wanted: set[str] | None = None
    if (local / SPLITS_YAML).is_file():
        regions = set(read_splits(local).get(split, []))
        wanted = {r["Tile_id"] for r in read_metadata(local) if r["RegionName"] in regions}
    items = []
    for sub in (RGB_DIR, EXTRA_DIR, LABEL_DIR):
        for rel, blob in store.list_under(sub).items():
            target = local / sub / rel
            if wanted is not None and Path(rel).stem not in wanted:
                continue
            if not (target.is_file() and target.stat().st_size == blob.size):
                items.append((blob, f"{sub}/{rel}", target))
    store.download_many(items)
    return local
