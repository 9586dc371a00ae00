"""DataLoaders of training, one builder for every reader (:func:`build_loader`): balanced curriculum batches for
train (training and the data validation that checks what training will see), sequential tiles for validation,
and the data validation's plain pass over a split."""

from __future__ import annotations

from collections.abc import Iterable
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


def build_loader(
    dataset: Any,
    *,
    num_workers: int,
    batch_size: int | None = None,
    batch_sampler: Iterable[Any] | None = None,
    pin_memory: bool = False,
    prefetch_factor: int | None = None,
    persistent_workers: bool = False,
    seed: int | None = None,
) -> torch.utils.data.DataLoader[Any]:
    """The one DataLoader constructor: every reader's loader is built here, so workers, their seeding and the
    batch order are set in one place. Batches come either in the dataset's order (``batch_size``) or as a batch
    sampler plans them (``batch_sampler``); exactly one of the two is given.

    Args:
        dataset: A map-style dataset (:class:`TileDataset` or one wrapping it).
        num_workers: Worker processes (0: batches load in this process). With workers, each is seeded by
            :func:`seed_worker`, prefetches ``prefetch_factor`` batches (None: torch's default) and is kept across
            epochs when ``persistent_workers``.
        batch_size: Sequential tiles in batches of this size, the last one partial.
        batch_sampler: The batches to load, each a list of dataset indices (the balanced curriculum sampler).
        pin_memory: Pin host memory for the copies to the GPU.
        prefetch_factor: Batches each worker loads ahead.
        persistent_workers: Keep the workers alive across epochs.
        seed: Seed of the loader's own generator, which draws the workers' base seed; None draws it from torch's
            global RNG, as training seeds it (and so advances that RNG each epoch, as it always has).
    """
    if (batch_size is None) == (batch_sampler is None):
        raise ValueError("build_loader takes either batch_size or batch_sampler")
    kw: dict[str, Any] = {"num_workers": num_workers, "pin_memory": pin_memory}
    if batch_sampler is not None:
        kw["batch_sampler"] = batch_sampler
    else:
        kw.update(batch_size=batch_size, shuffle=False)
    if num_workers > 0:  # torch refuses these without workers
        kw.update(worker_init_fn=seed_worker, prefetch_factor=prefetch_factor, persistent_workers=persistent_workers)
    if seed is not None:
        kw["generator"] = torch.Generator().manual_seed(seed)
    return torch.utils.data.DataLoader(dataset, **kw)  # any map-style dataset, not only Dataset subclasses


def positive_flags(ds: TileDataset) -> np.ndarray:
    """Per dataset position: does the tile hold label-1 pixels (from store metadata, no pixel reads)."""
    meta = getattr(ds.source, "metadata", None)
    if meta is not None:
        return np.asarray(meta.is_positive)[ds.indices]
    return np.array([(ds.source[int(i)].label == 1).any() for i in ds.indices])


def mapped_negative_flags(ds: TileDataset) -> np.ndarray | None:
    """Per dataset position: does the tile hold a mapped Negative polygon of the inventory
    (``TileMetadata.mapped_negative``); None when its source records none."""
    meta = getattr(ds.source, "metadata", None)
    if meta is None or getattr(meta, "negative_uids", None) is None:
        return None
    return np.asarray(meta.mapped_negative)[ds.indices]


def _configured(cfg: PipelineConfig, num_workers: int | None = None) -> dict[str, Any]:
    """:func:`build_loader`'s settings from ``data.loader``: pinned memory only with a GPU to copy to; a
    ``num_workers`` override (a reader that takes a few batches) keeps no persistent workers."""
    lc = cfg.data.loader
    return {
        "num_workers": lc.num_workers if num_workers is None else num_workers,
        "pin_memory": lc.pin_memory and torch.cuda.is_available(),
        "prefetch_factor": lc.prefetch_factor,
        "persistent_workers": lc.persistent_workers and num_workers is None,
    }


def train_loader(
    cfg: PipelineConfig,
    ds: TileDataset,
    seed: int,
    *,
    num_workers: int | None = None,
    rank: int = 0,
    world_size: int = 1,
) -> tuple[Any, BalancedCurriculumSampler]:
    """The training DataLoader and its batch sampler: balanced curriculum batches of ``ds`` (guide §7) of
    ``training.batch_size`` tiles; with ``world_size`` N ranks, rank ``rank``'s slice of ``training.batch_size``
    tiles of each effective batch of ``training.batch_size x N``.

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
        mapped_negative=mapped_negative_flags(ds),
    )
    return build_loader(ds, batch_sampler=sampler, **_configured(cfg, num_workers)), sampler


def val_loader(cfg: PipelineConfig, ds: TileDataset, *, batch_size: int | None = None) -> Any:
    """Sequential tiles of an evaluated split (validation during training, calibration, test), in batches of
    ``batch_size`` (default ``training.batch_size``, per device: each rank of a seed on several devices validates
    its shard of the pool in batches of it).

    Raises:
        DataValidationError: the split has no usable tile (all full NoData, say): its metrics would be undefined,
            so it is refused here, before any training step, naming the store.
    """
    if len(ds) == 0:
        raise DataValidationError(_no_usable_tile(ds))
    return build_loader(ds, batch_size=batch_size or cfg.training.batch_size, **_configured(cfg))


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
