"""GeoTIFF ingestion benchmark: tiles/s and peak RSS of `rts generate --source geotiff` on 512 x 512 tiles.

A data root in the tile layout (docs/geotiff.md) is written first with `rts synth-geotiff` (not timed: RGB+alpha
uint8, 1 EXTRA float32 band, labels, LZW, EPSG:3857). Ingestion then runs in a fresh process per size, so
its peak RSS is its own: N/4 and N tiles side by side show that memory is bounded by the generation batch
and the shard buffer, not by the dataset. Median of --repeats runs per size.

Usage: python bench/ingest_bench.py [--tiles 1000] [--workers 1] [--repeats 1] [--quick]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from rtscore.config import GenerationConfig
from rtscore.data.geotiff.ingest import ingest_geotiffs
cfg = GenerationConfig.model_validate(json.loads({cfg!r}))
t0 = time.perf_counter()
attrs = ingest_geotiffs(cfg, {data!r}, {out!r}, overwrite=True, num_workers={workers})
dt = time.perf_counter() - t0
print(json.dumps({{"seconds": dt, "tiles": attrs.counts.n_tiles,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "children_peak_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}}))
"""


def gen_config(n: int, tile: int, split: str = "train") -> dict:
    n_pos = n // 2
    return {
        "split": split,
        "seed": 7,
        "tile_size": tile,
        "synthetic": {
            "n_positive": n_pos,
            "n_negative": n - n_pos,
            "regions": ["elias range tundra", "brooks foothills tundra"],
            "extra_channels": ["ndvi"],
            "generation_batch_size": 16,
        },
        "store": {"shard_tiles": 32},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, default=1000)
    ap.add_argument("--tile-size", type=int, default=512)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="smoke run: 40 tiles of 128 px")
    args = ap.parse_args()
    if args.quick:
        args.tiles, args.tile_size = 40, 128
    from rtscore.config import GenerationConfig
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    tmp = Path(tempfile.mkdtemp(prefix="rts-ingest-bench-"))
    try:
        results = {}
        for n in (args.tiles // 4, args.tiles):
            cfg = GenerationConfig.model_validate(gen_config(n, args.tile_size))
            data = tmp / f"root_{n}"
            t0 = time.perf_counter()
            write_synthetic_geotiffs(cfg, data)
            size = sum(f.stat().st_size for f in data.rglob("*") if f.is_file())
            print(
                f"data root: {n} tiles of {args.tile_size} px, {size / 2**20:.1f} MiB of GeoTIFFs "
                f"(written in {time.perf_counter() - t0:.1f} s, not timed)"
            )
            runs = []
            for _ in range(args.repeats):
                code = CHILD.format(
                    root=str(ROOT),
                    cfg=json.dumps(cfg.model_dump(mode="json")),
                    data=str(data),
                    out=str(tmp / f"store_{n}.zarr"),
                    workers=args.workers,
                )
                out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            secs = statistics.median(r["seconds"] for r in runs)
            rss = max(max(r["peak_rss_mib"], r["children_peak_rss_mib"]) for r in runs)
            results[n] = (secs, rss)
            print(
                f"ingestion, {n:5d} tiles, {args.workers} worker(s): {n / secs:6.1f} tiles/s "
                f"({secs:.1f} s), peak RSS {rss:.1f} MiB"
            )
            shutil.rmtree(data)
        small, big = args.tiles // 4, args.tiles
        print(f"peak RSS {big} / {small} tiles: {results[big][1] / results[small][1]:.2f} (bounded memory: ~1)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
