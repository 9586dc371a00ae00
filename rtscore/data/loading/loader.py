"""DataLoaders of training, one builder for every reader: balanced curriculum batches for train (training and
the data validation that checks what training will see), sequential tiles for validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.errors import DataValidationError
from rtscore.data.loading.dataset import TileDataset
from rtscore.data.loading.sampler import BalancedCurriculumSampler


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
        dataset,  # type: ignore[arg-type]  # torch's stub wants a Dataset subclass; any map-style dataset works
        batch_size=batch_size,
        shuffle=shuffle,
        num_workers=num_workers,
        worker_init_fn=seed_worker,
        generator=g,
        persistent_workers=kwargs.pop("persistent_workers", False) and num_workers > 0,
        **kwargs,
    )


def positive_flags(ds: TileDataset) -> np.ndarray:
    """Per dataset position: does the tile hold label-1 pixels (from store metadata, no pixel reads)."""
    meta = getattr(ds.source, "metadata", None)
    if meta is not None:
        return np.asarray(meta.is_positive)[ds.indices]
    return np.array([(ds.source[int(i)].label == 1).any() for i in ds.indices])


def _loader_kwargs(cfg: PipelineConfig, device_cuda: bool, num_workers: int | None = None) -> dict[str, Any]:
    lc = cfg.data.loader
    workers = lc.num_workers if num_workers is None else num_workers
    kw: dict[str, Any] = {"num_workers": workers, "pin_memory": lc.pin_memory and device_cuda}
    if workers > 0:
        kw.update(
            prefetch_factor=lc.prefetch_factor,
            persistent_workers=lc.persistent_workers and num_workers is None,
            worker_init_fn=seed_worker,
        )
    return kw


def train_loader(
    cfg: PipelineConfig,
    ds: TileDataset,
    seed: int,
    *,
    num_workers: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[Any, BalancedCurriculumSampler]:
    """The training DataLoader and its batch sampler: balanced curriculum batches of ``ds`` (guide §7); with
    ``world_size`` ranks, rank ``rank``'s slice of each global batch of ``training.batch_size``.

    ``num_workers`` overrides ``data.loader.num_workers`` (and then keeps no persistent workers) for a reader
    that takes a few batches, such as data validation; which tiles a batch holds and how each is augmented
    come from the sampler alone, so they do not depend on the worker count.
    """
    sampler = BalancedCurriculumSampler(
        positive_flags(ds),
        batch_size=cfg.training.batch_size,
        positive_fraction=cfg.sampling.positive_fraction,
        schedule=cfg.sampling.curriculum_schedule,
        seed=seed,
        balanced=cfg.sampling.balanced,
        steps_per_epoch=cfg.training.steps_per_epoch,
        drop_last=cfg.data.loader.drop_last,
        rank=rank,
        world_size=world_size,
    )
    loader: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(
        ds,  # type: ignore[arg-type]  # torch's stub wants a Dataset subclass; any map-style dataset works
        batch_sampler=sampler,
        **_loader_kwargs(cfg, torch.cuda.is_available(), num_workers),
    )
    return loader, sampler


def val_loader(cfg: PipelineConfig, ds: TileDataset, *, batch_size: int | None = None) -> Any:
    """Sequential tiles of an evaluated split (validation during training, calibration, test), in batches of
    ``batch_size`` (default ``training.batch_size``; a rank of a seed on several devices: its share).

    Raises:
        DataValidationError: the split has no usable tile (all full NoData, say): its metrics would be undefined,
            so it is refused here, before any training step, naming the store.
    """
    if len(ds) == 0:
        raise DataValidationError(_no_usable_tile(ds))
    return torch.utils.data.DataLoader(
        ds,  # type: ignore[arg-type]  # torch's stub wants a Dataset subclass; any map-style dataset works
        batch_size=batch_size or cfg.training.batch_size,
        shuffle=False,
        **_loader_kwargs(cfg, torch.cuda.is_available()),
    )


def _no_usable_tile(ds: Any) -> str:
    """Why an evaluated split has no tile to evaluate, naming its store."""
    source = getattr(ds, "source", None)
    if source is None:  # a dataset wrapping another (ContextPairedDataset)
        source = getattr(getattr(ds, "base", None), "source", None)
    path = getattr(source, "path", None)
    where = f"store {path}" if path is not None else f"the split's {type(source).__name__}"
    n = 0 if source is None else len(source)
    meta = getattr(source, "metadata", None)
    if n == 0:
        held = "it holds no tile"
    elif meta is not None and int(np.asarray(meta.full_nodata).sum()) == n:
        held = f"all its {n} tiles are full NoData, which never enter a batch (data.exclude_full_nodata)"
    else:
        held = f"none of its {n} tiles enters a batch"
    return (
        f"{where}: no usable tile to evaluate: {held}; run rts validate to check every split, and fix this split "
        "(its regions, or the data it is generated from) before training"
    )
