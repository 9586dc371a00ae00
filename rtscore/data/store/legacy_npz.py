"""The legacy batched `.npz` layout (batch_NNN.npz + metadata.json): LRU reader, writer, and Zarr import."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import StoreLayout
from rtscore.data.store.writer import base_attrs, write_store
from rtscore.data.tiles import KIND_CODES, RawTile, StoredSample, nominal_pixel_area_m2
from rtscore.errors import PipelineError
from rtscore.identity import digest
from rtscore.storage import fingerprint

NOISY_DIRS = ("noisy_masks", "mad_masks")


class LegacyNpzError(PipelineError, ValueError):
    """A legacy batched dataset is malformed; the message names the file."""


class BatchWriter:
    """Accumulate samples and write ``batch_NNN.npz`` files of ``samples_per_batch`` (the notes' design)."""

    def __init__(self, output_dir: str | Path, samples_per_batch: int = 100, compress: bool = False) -> None:
        self.dir = Path(output_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.per_batch = samples_per_batch
        self.compress = compress
        self._buf: list[RawTile] = []
        self._n_batches = 0
        self._n = 0
        self._first: RawTile | None = None

    def add(self, tile: RawTile) -> None:
        self._first = self._first or tile
        self._buf.append(tile)
        if len(self._buf) == self.per_batch:
            self._flush()

    def _flush(self) -> None:
        if not self._buf:
            return
        arrays: dict[str, Any] = {
            "images": np.stack([t.rgb for t in self._buf]),
            "masks": np.stack([t.label_exact for t in self._buf]),
            "alpha": np.stack([t.alpha for t in self._buf]),
            "tile_ids": np.array([t.tile_id for t in self._buf]),
            "regions": np.array([t.region for t in self._buf]),
        }
        if self._buf[0].extra is not None:
            extra = [t.extra for t in self._buf if t.extra is not None]
            if len(extra) != len(self._buf):
                raise LegacyNpzError(f"{self.dir}: some samples of a batch have extra bands and others none")
            arrays["extra"] = np.stack(extra)
        save = np.savez_compressed if self.compress else np.savez
        save(self.dir / f"batch_{self._n_batches:03d}.npz", **arrays)
        self._n += len(self._buf)
        self._n_batches += 1
        self._buf = []

    def finalize(self, extra_channel_names: list[str] | None = None, **info: Any) -> Path:
        self._flush()
        size = self._first.size if self._first else 0
        meta = {
            "num_samples": self._n,
            "samples_per_batch": self.per_batch,
            "num_batches": self._n_batches,
            "tile_size": size,
            "channel_names": ["R", "G", "B", *(extra_channel_names or [])],
            **info,
        }
        path = self.dir / "metadata.json"
        path.write_text(json.dumps(meta, indent=2))
        return path


class BatchedNpzSource:
    """Random access to a legacy batched dataset through an LRU cache of whole batch files."""

    def __init__(self, path: str | Path, cache_size: int = 3) -> None:
        self.path = Path(path)
        meta_path = self.path / "metadata.json"
        if not meta_path.is_file():
            raise LegacyNpzError(f"legacy dataset {self.path}: metadata.json not found")
        try:
            self.info = json.loads(meta_path.read_text())
            self.n = int(self.info["num_samples"])
            self.per_batch = int(self.info["samples_per_batch"])
        except (ValueError, KeyError) as err:
            raise LegacyNpzError(f"{meta_path}: malformed ({err})") from None
        self.tile_size = int(self.info.get("tile_size", 0))
        self.channel_names = list(self.info.get("channel_names", ["R", "G", "B"]))
        self.cache_size = cache_size
        self._cache: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()

    def __len__(self) -> int:
        return self.n

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = OrderedDict()
        return state

    def _batch(self, b: int) -> dict[str, np.ndarray]:
        if b in self._cache:
            self._cache.move_to_end(b)
            return self._cache[b]
        f = self.path / f"batch_{b:03d}.npz"
        try:
            with np.load(f, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except (OSError, ValueError) as err:
            raise LegacyNpzError(f"legacy batch {f}: cannot read ({err})") from None
        self._cache[b] = data
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return data

    def __getitem__(self, index: int) -> StoredSample:
        if not 0 <= index < self.n:
            raise IndexError(f"tile index {index} out of range for {self.n} tiles in {self.path}")
        data = self._batch(index // self.per_batch)
        j = index % self.per_batch
        images = data["images"]
        alpha = data["alpha"][j] if "alpha" in data else np.full(images.shape[-2:], 255, np.uint8)
        tile_id = str(data["tile_ids"][j]) if "tile_ids" in data else f"{self.path.name}_{index:06d}"
        region = str(data["regions"][j]) if "regions" in data else "unknown"
        extra = data["extra"][j] if "extra" in data else None
        # Legacy batches carry no georeferencing: the nominal 4.77 m pixel of the tiles they were cut from.
        area = nominal_pixel_area_m2()
        return StoredSample(index, tile_id, region, images[j], alpha, data["masks"][j], extra, pixel_area_m2=area)


class NpzProducer:
    """Feeds legacy batches into the Zarr writer (exact masks plus an optional noisy/MAD variant)."""

    def __init__(self, exact_dir: Path, noisy_dir: Path | None) -> None:
        self.exact_dir, self.noisy_dir = exact_dir, noisy_dir

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        exact = BatchedNpzSource(self.exact_dir, cache_size=1)
        noisy = BatchedNpzSource(self.noisy_dir, cache_size=1) if self.noisy_dir else None
        tiles: list[RawTile] = []
        codes: list[int] = []
        for i in range(start, stop):
            s = exact[i]
            n = noisy[i] if noisy else None
            if n is not None and n.tile_id != s.tile_id:
                raise LegacyNpzError(
                    f"tile {i}: {self.noisy_dir} holds {n.tile_id}, {self.exact_dir} holds {s.tile_id}"
                )
            tiles.append(
                RawTile(
                    tile_id=s.tile_id,
                    region=s.region,
                    rgb=np.ascontiguousarray(s.rgb, np.uint8),
                    alpha=np.ascontiguousarray(s.alpha, np.uint8),
                    label_exact=np.ascontiguousarray(s.label, np.uint8),
                    label_noisy=None if n is None else np.ascontiguousarray(n.label, np.uint8),
                    extra=None if s.extra is None else np.ascontiguousarray(s.extra, np.float32),
                    n_objects=0,
                    source_index=i,
                    pixel_area_m2=s.pixel_area_m2,
                )
            )
            kind = "full_nodata" if not (s.alpha > 0).any() else "positive" if (s.label == 1).any() else "negative"
            codes.append(KIND_CODES[kind])
            if len(tiles) == exact.per_batch:
                yield tiles, codes
                tiles, codes = [], []
        if tiles:
            yield tiles, codes


def import_npz(
    input_dir: str | Path,
    output: str | Path,
    *,
    split: str,
    shard_tiles: int = 32,
    num_workers: int = 1,
    overwrite: bool = False,
    progress: bool = False,
) -> StoreAttrs:
    """`rts import-npz`: convert a legacy batched dataset into a published Zarr tile store."""
    root = Path(input_dir)
    exact_dir = root / "exact_masks" if (root / "exact_masks").is_dir() else root
    noisy_dir = next((root / d for d in NOISY_DIRS if (root / d / "metadata.json").is_file()), None)
    src = BatchedNpzSource(exact_dir)
    if len(src) == 0:
        raise LegacyNpzError(f"legacy dataset {exact_dir} holds no samples")
    first = src[0]
    extra_names = src.channel_names[3:]
    layout = StoreLayout(
        n_tiles=len(src),
        tile_size=int(first.rgb.shape[-1]),
        extra_channel_names=tuple(extra_names),
        shard_tiles=shard_tiles,
        write_noisy=noisy_dir is not None,
    )
    attrs = base_attrs(
        split=split,
        source="legacy-npz",
        tile_size=layout.tile_size,
        extra=extra_names,
        mask_types=["exact", "noisy"] if noisy_dir else ["exact"],
        dataset_version=str(src.info.get("dataset_version", "legacy")),
    )
    source_fp = fingerprint(exact_dir)[0]
    attrs.update(
        {
            "config": {"input": str(root), "legacy_metadata": src.info, "shard_tiles": shard_tiles},
            "config_hash": digest([source_fp, split, shard_tiles]),
            "seed": None,
            "shard_tiles": shard_tiles,
        }
    )
    return write_store(
        NpzProducer(exact_dir, noisy_dir),
        layout,
        Path(output),
        attrs,
        num_workers=num_workers,
        overwrite=overwrite,
        progress=progress,
    )
