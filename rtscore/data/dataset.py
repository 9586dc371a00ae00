"""Torch Dataset over any tile source: NoData, normalization and augmentation applied per sample."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from rtscore.data.tiles import StoredSample

if TYPE_CHECKING:
    import torch

    from rtscore.config.pipeline import PipelineConfig
    from rtscore.data.normalization import NormalizationStats


class TileSource(Protocol):
    """Anything with ``__len__`` and ``__getitem__`` returning :class:`StoredSample` (Zarr, legacy npz, ...)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> StoredSample: ...


def usable_indices(source: TileSource, exclude_full_nodata: bool = True) -> np.ndarray:
    """Indices that may enter a batch: full-NoData tiles are skipped at the dataset level (guide §4.4)."""
    meta = getattr(source, "metadata", None)
    if meta is not None:
        keep = ~meta.full_nodata if exclude_full_nodata else np.ones(len(meta), bool)
        return np.flatnonzero(keep)
    if not exclude_full_nodata:
        return np.arange(len(source))
    return np.array([i for i in range(len(source)) if (source[i].alpha > 0).any()], dtype=np.int64)


class TileDataset:
    """Map-style dataset yielding dicts of tensors; index may be ``int`` or ``(int, augmentation_seed)``.

    Samples: ``image`` float32 (C, H, W) normalized, ``label`` int64 (H, W) in {0, 1, 255},
    ``valid`` bool (H, W), ``index`` (position in the source), ``tile_id``, ``region``.
    """

    def __init__(
        self,
        source: TileSource,
        stats: NormalizationStats,
        *,
        augmentation: Any = None,
        nodata_handling: bool = True,
        boundary_handling: Literal["none", "ignore", "soft_labels"] = "none",
        boundary_ignore_width: int = 0,
        exclude_full_nodata: bool = True,
        indices: Sequence[int] | None = None,
        seed: int = 0,
    ) -> None:
        from rtscore.data.transforms import SamplePipeline

        self.source = source
        self.stats = stats
        names = getattr(source, "channel_names", None)
        if names is not None and list(names) != list(stats.channel_names):
            raise ValueError(
                f"normalization stats {stats.source} are for channels {stats.channel_names}, "
                f"but the data source has {list(names)}"
            )
        self.indices = np.asarray(indices if indices is not None else usable_indices(source, exclude_full_nodata))
        self.seed = seed
        self.epoch = 0
        self.pipeline = SamplePipeline(
            mean=stats.mean.tolist(),
            std=stats.std.tolist(),
            augmentation=augmentation,
            nodata_handling=nodata_handling,
            boundary_handling=boundary_handling,
            boundary_ignore_width=boundary_ignore_width,
        )
        self.augmenting = augmentation is not None and getattr(augmentation, "enabled", True)

    def __len__(self) -> int:
        return int(self.indices.size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _sample_seed(self, position: int) -> int:
        return int(np.random.SeedSequence([self.seed, self.epoch, position]).generate_state(1)[0])

    def __getitem__(self, item: int | tuple[int, int]) -> dict[str, Any]:
        import torch

        position, aug_seed = item if isinstance(item, tuple) else (item, None)
        src_index = int(self.indices[position])
        s = self.source[src_index]
        rgb, extra = s.rgb, s.extra
        if self.stats.clip_min is not None and self.stats.clip_max is not None:
            rgb = np.clip(rgb, self.stats.clip_min[:3], self.stats.clip_max[:3]).astype(np.uint8)
            if extra is not None:
                lo, hi = self.stats.clip_min[3:, None, None], self.stats.clip_max[3:, None, None]
                extra = np.clip(extra, lo, hi).astype(np.float32)
        seed = None
        if self.augmenting:
            seed = aug_seed if aug_seed is not None else self._sample_seed(position)
        image, label, valid = self.pipeline(rgb, extra, s.alpha, s.label, seed)
        return {
            "image": torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32)),
            "label": torch.from_numpy(np.ascontiguousarray(label, dtype=np.int64)),
            "valid": torch.from_numpy(np.ascontiguousarray(valid, dtype=bool)),
            "index": src_index,
            "tile_id": s.tile_id,
            "region": s.region,
        }


def open_source(path: str | Path, mask_type: str = "exact", extra_channels: list[str] | None = None) -> TileSource:
    """Open a Zarr store, or a legacy batched-npz directory, by what is at ``path``."""
    p = Path(path)
    if (p / "metadata.json").is_file() and not (p / "zarr.json").is_file():
        from rtscore.data.legacy_npz import BatchedNpzSource

        return BatchedNpzSource(p)
    from rtscore.data.store import ZarrTileStore

    return ZarrTileStore(p, mask_type=mask_type, extra_channels=extra_channels)


def build_dataset(
    cfg: PipelineConfig, store: str | Path, stats: NormalizationStats, *, train: bool, seed: int = 0
) -> TileDataset:
    """The dataset of one split as the config says (augmentation only when ``train``)."""
    source = open_source(store, cfg.data.mask_type, [c.name for c in cfg.channels.extra])
    return TileDataset(
        source,
        stats,
        augmentation=cfg.augmentation if train and cfg.augmentation.enabled else None,
        nodata_handling=cfg.data.nodata_handling,
        boundary_handling=cfg.loss.boundary_handling,
        boundary_ignore_width=cfg.loss.boundary_ignore_width,
        exclude_full_nodata=cfg.data.exclude_full_nodata,
        seed=seed,
    )


def seed_worker(worker_id: int) -> None:
    """DataLoader worker_init_fn: numpy/random seeded from torch's per-worker seed (guide §2.2)."""
    import random

    import torch

    s = torch.initial_seed() % 2**32
    np.random.seed(s)
    random.seed(s)


def make_loader(
    dataset: TileDataset, *, batch_size: int, shuffle: bool, num_workers: int, seed: int = 0, **kwargs: Any
) -> torch.utils.data.DataLoader[Any]:
    """A DataLoader with seeded workers and a seeded shuffle generator."""
    import torch

    g = torch.Generator()
    g.manual_seed(seed)
    return torch.utils.data.DataLoader(
        dataset,  # type: ignore[arg-type]
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        worker_init_fn=seed_worker,
        generator=g,
        persistent_workers=kwargs.pop("persistent_workers", False) and num_workers > 0,
        **kwargs,
    )
