"""``RunDir.require`` of a staged input: the first call (hash the mirror) vs the second (verification record).

A gs:// run (the in-process GCS emulator) whose local mirror already holds ``datasets/train.zarr``, the
4,000-tile 512-px config store users run (two EXTRA channels by default, ``--extra``; 100 rendered synthetic
tiles cycled over 4,000 tile ids, as ``data_bench.py`` (b)), written by the project's writer and recorded in
the bucket's manifest. The objects themselves are not uploaded: the mirror already holds the content, so no
call downloads; what is measured is the verification of the staged copy, which before issue 13 every call
paid. Each repetition deletes the verification record, then times, each on a fresh ``RunDir``:

- first: ``require`` hashes the mirror and writes the record;
- second, same process: the next stage of a flow run (same process: the process's client, the parsed
  manifest of an unchanged generation);
- second, new client: the same after forgetting the process's client and parsed manifests;
- second, new process: ``require`` timed inside a fresh interpreter (a client made on first use), as a stage
  in another worker process pays it; the import of google-cloud-storage just before it is timed apart (a
  process importing it for its first gs:// call pays it once).

The store stays in the page cache: a cold cache makes the first call slower still.

Usage: python bench/require_bench.py [--quick] [--tiles N] [--extra E] [--repeats R] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from data_bench import CycledProducer  # noqa: E402  (bench/ is on the path of a bench script)

from rtscore.config.generation import GenerationConfig  # noqa: E402
from rtscore.data.tiles import RawTile  # noqa: E402
from rtscore.storage import MANIFEST_NAME, ArtifactEntry, Manifest, RunDir, RunLayout, fingerprint  # noqa: E402
from rtscore.storage.rundir import forget_parsed_manifests  # noqa: E402
from rtscore.storage.verified import record_path  # noqa: E402

TILE = 512
BUCKET = "rts-bench"


def with_extra(tiles: list[RawTile], extra: int) -> list[RawTile]:
    """The tiles with ``extra`` EXTRA channels derived from their RGB (none: unchanged)."""
    if not extra:
        return tiles
    return [
        dataclasses.replace(t, extra=np.stack([t.rgb[i % 3].astype(np.float32) / 255 for i in range(extra)]))
        for t in tiles
    ]


def write_config_store(path: Path, n: int, unique: int, extra: int) -> None:
    from rtscore.data.store.format import StoreLayout
    from rtscore.data.store.writer import base_attrs, write_store
    from rtscore.data.synthetic import plan_tiles, render_tile

    cfg = GenerationConfig(
        split="train",
        tile_size=TILE,
        seed=1,
        synthetic={"n_positive": unique // 2, "n_negative": unique - unique // 2, "regions": ["a", "b", "c"]},
    )
    tiles = [render_tile(p, cfg) for p in plan_tiles(cfg)]
    names = tuple(f"extra{i}" for i in range(extra))
    layout = StoreLayout(n_tiles=n, tile_size=TILE, extra_channel_names=names, shard_tiles=32)
    attrs = base_attrs(
        split="train",
        source="bench",
        tile_size=TILE,
        extra=list(names),
        mask_types=["exact", "noisy"],
        dataset_version="bench",
    )
    attrs.update({"config": {}, "config_hash": "bench", "seed": 0, "shard_tiles": 32})
    write_store(CycledProducer(with_extra(tiles, extra), n), layout, path, attrs, overwrite=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="400 tiles (a smoke run, not the quoted figures)")
    p.add_argument("--tiles", type=int, default=4000, help="tiles in the store (default 4000)")
    p.add_argument("--extra", type=int, default=2, help="EXTRA channels (default 2: the config store users run)")
    p.add_argument("--repeats", type=int, default=3, help="repetitions (default 3, at least 3 for the quoted ranges)")
    p.add_argument("--workdir", default=None, help="scratch directory (default: a temp dir, removed after)")
    args = p.parse_args()
    n = 400 if args.quick else args.tiles
    from gcp_storage_emulator.server import create_server

    from rtscore.storage.gcs import EMULATOR_ENV, make_client, reset_clients

    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="rts-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    os.environ[EMULATOR_ENV] = f"http://127.0.0.1:{port}"
    try:
        uri = f"gs://{BUCKET}/{uuid.uuid4().hex[:8]}/run"
        run = RunDir(uri, cache_dir=workdir / "cache")
        rel = RunLayout.DATASET.at(split="train")
        t0 = time.perf_counter()
        write_config_store(run.path(rel), n, unique=min(100, n), extra=args.extra)
        t_write = time.perf_counter() - t0
        sha, size = fingerprint(run.path(rel))
        entry = ArtifactEntry(
            path=rel,
            uri=run.uri_of(rel),
            kind="dir",
            sha256=sha,
            bytes=size,
            stage="generate-dataset",
            config_hash="bench",
            created=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        manifest = Manifest(artifacts={rel: entry}).model_dump_json(indent=2)
        prefix = uri.removeprefix(f"gs://{BUCKET}/")
        make_client().bucket(BUCKET).blob(f"{prefix}/{MANIFEST_NAME}").upload_from_string(manifest)
        files = sum(1 for f in run.path(rel).rglob("*") if f.is_file())
        cache = workdir / "cache"
        child = (
            "import time; from rtscore.storage import RunDir; t0 = time.perf_counter(); "
            "import google.cloud.storage; t1 = time.perf_counter(); "
            f"RunDir({uri!r}, cache_dir={str(cache)!r}).require({rel!r}); t2 = time.perf_counter(); "
            "print(t1 - t0, t2 - t1)"
        )
        env = os.environ | {"PYTHONPATH": str(ROOT)}
        times: dict[str, list[float]] = {k: [] for k in ("first", "same", "client", "process", "import")}
        for _ in range(args.repeats):
            record_path(run.root, rel).unlink(missing_ok=True)
            for kind in ("first", "same", "client"):
                if kind == "client":
                    reset_clients()
                    forget_parsed_manifests()
                t0 = time.perf_counter()
                got = RunDir(uri, cache_dir=cache).require(rel)
                times[kind].append(time.perf_counter() - t0)
                assert got.sha256 == sha
            out = subprocess.run([sys.executable, "-c", child], env=env, capture_output=True, text=True, check=True)
            t_import, t_require = (float(x) for x in out.stdout.split())
            times["import"].append(t_import)
            times["process"].append(t_require)
    finally:
        server.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    gib = size / 2**30
    print(
        f"store: {n} tiles {TILE}x{TILE}, {args.extra} EXTRA, {files} files, {gib:.2f} GiB (written in {t_write:.0f} s)"
    )
    m1 = statistics.median(times["first"])
    labels = {
        "first": "first call (hash the mirror)",
        "same": "second, same process",
        "client": "second, new client",
        "process": "second, new process",
        "import": "(new process: import g-c-s before)",
    }
    for kind, label in labels.items():
        t = times[kind]
        m = statistics.median(t)
        ratio = "" if kind == "first" else f"  = {100 * m / m1:.2f} % of the first"
        print(f"require, {label:30s}: median {m:8.4f} s  range {min(t):.4f}-{max(t):.4f} s{ratio}")
    m2 = statistics.median(times["same"])
    print(f"second (same process) / first: {m2 / m1:.4f} ({100 * m2 / m1:.2f} %; target <= 1 %)")
    summary = {"tiles": n, "extra": args.extra, "files": files, "gib": gib, "seconds": times}
    print(json.dumps(summary | {"ratio": m2 / m1, "ratio_new_process": statistics.median(times["process"]) / m1}))


if __name__ == "__main__":
    main()
