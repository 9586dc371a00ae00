"""What it costs to know whether a GeoTIFF data root changed: its listing identity vs reading every file.

The generate stage's cache key and an ingestion's resume key hold the data root's identity
(`rtscore.identity.source_identity`): one directory walk with a stat per file, plus the sha256 of the small
non-raster files (metadata.csv, splits.yaml). The alternative it replaces in the issue's terms, "a read of every
pixel", is the sha256 of every file. Both are timed side by side on the same root, interleaved, --repeats times.

The root: --tiles tiles in the layout of a real data root (PLANET-RGB/, labels/, EXTRA/, metadata.csv,
splits.yaml), 512 px as `configs/generation/geotiff_train.yaml`, EXTRA with two float32 bands (ndvi, slope) as the
project's config stores carry. Eight real tile file sets are written by `rts synth-geotiff`'s writer, then every
tile name is a hard link to one of them: each name has a real tile's size and format (what a stat and a hash see)
at the disk cost of eight tiles. The hashes read from the page cache, the cheapest a full read can be (a cold read
from disk or a gs:// download is slower), so the ratio below is a lower bound.

Usage: python bench/identity_bench.py [--tiles 10000] [--repeats 5] [--quick]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATES = 8


def build_root(root: Path, n_tiles: int) -> tuple[int, int]:
    """A data root of ``n_tiles`` tiles (hard links to TEMPLATES real tiles); returns (files, bytes)."""
    from rtscore.config import GenerationConfig
    from rtscore.data.geotiff.synth import write_synthetic_geotiffs

    templates = root.parent / "templates"
    cfg = GenerationConfig.model_validate(
        {
            "split": "train",
            "seed": 5,
            "tile_size": 512,
            "synthetic": {
                "n_positive": TEMPLATES // 2,
                "n_negative": TEMPLATES - TEMPLATES // 2,
                "regions": ["elias range tundra", "brooks foothills tundra"],
                "extra_channels": ["ndvi", "slope"],
            },
            "store": {"shard_tiles": 32},
        }
    )
    write_synthetic_geotiffs(cfg, templates)
    with open(templates / "metadata.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    dirs = [d.name for d in templates.iterdir() if d.is_dir()]
    files = total = 0
    out_rows = []
    for i in range(n_tiles):
        src = rows[i % len(rows)]
        tid = f"tile_{i:06d}"
        for d in dirs:
            (root / d).mkdir(parents=True, exist_ok=True)
            target = templates / d / f"{src['Tile_id']}.tif"
            if target.exists():
                os.link(target, root / d / f"{tid}.tif")
                files += 1
                total += target.stat().st_size
        out_rows.append({**src, "Tile_id": tid})
    with open(root / "metadata.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(out_rows[0]))
        writer.writeheader()
        writer.writerows(out_rows)
    (root / "splits.yaml").write_bytes((templates / "splits.yaml").read_bytes())
    return files + 2, total


def hash_every_file(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            with p.open("rb") as f:
                h.update(hashlib.file_digest(f, "sha256").digest())
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tiles", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="500 tiles, 2 repeats: a smoke run")
    args = ap.parse_args()
    if args.quick:
        args.tiles, args.repeats = 500, 2

    from rtscore.identity import source_identity

    with tempfile.TemporaryDirectory(prefix="rts-identity-bench-") as tmp:
        root = Path(tmp) / "root"
        t0 = time.perf_counter()
        files, size = build_root(root, args.tiles)
        print(f"root: {args.tiles} tiles, {files} files, {size / 2**30:.2f} GiB ({time.perf_counter() - t0:.0f} s)")
        hash_every_file(root)  # warm the page cache: both are timed from memory
        listing: list[float] = []
        full: list[float] = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            identity = source_identity(root)
            listing.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            hash_every_file(root)
            full.append(time.perf_counter() - t0)
        assert identity.files == files
        ratios = sorted(f / s for f, s in zip(full, listing, strict=True))

        def fmt(xs: list[float]) -> str:
            return f"{statistics.median(xs):.3f} s [{min(xs):.3f}-{max(xs):.3f}]"

        print(f"listing identity (source_identity):  {fmt(listing)}")
        print(f"sha256 of every file (page cache):   {fmt(full)}")
        print(
            f"ratio full read / listing:           {statistics.median(ratios):.0f}x "
            f"[{ratios[0]:.0f}-{ratios[-1]:.0f}] over {args.repeats} interleaved repetitions"
        )


if __name__ == "__main__":
    main()
