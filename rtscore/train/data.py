"""DataLoaders of training: balanced curriculum batches for train, sequential tiles for validation."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.dataset import TileDataset, seed_worker
from rtscore.data.sampler import BalancedCurriculumSampler


def positive_flags(ds: TileDataset) -> np.ndarray:
    """Per dataset position: does the tile hold label-1 pixels (from store metadata, no pixel reads)."""
    meta = getattr(ds.source, "metadata", None)
    if meta is not None:
        return np.asarray(meta.is_positive)[ds.indices]
    return np.array([(ds.source[int(i)].label == 1).any() for i in ds.indices])


def _loader_kwargs(cfg: PipelineConfig, device_cuda: bool) -> dict[str, Any]:
    lc = cfg.data.loader
    kw: dict[str, Any] = {"num_workers": lc.num_workers, "pin_memory": lc.pin_memory and device_cuda}
    if lc.num_workers > 0:
        kw.update(
            prefetch_factor=lc.prefetch_factor, persistent_workers=lc.persistent_workers, worker_init_fn=seed_worker
        )
    return kw


def train_loader(cfg: PipelineConfig, ds: TileDataset, seed: int) -> tuple[Any, BalancedCurriculumSampler]:
    sampler = BalancedCurriculumSampler(
        positive_flags(ds),
        batch_size=cfg.training.batch_size,
        positive_fraction=cfg.sampling.positive_fraction,
        schedule=cfg.sampling.curriculum_schedule,
        seed=seed,
        balanced=cfg.sampling.balanced,
        steps_per_epoch=cfg.training.steps_per_epoch,
        drop_last=cfg.data.loader.drop_last,
    )
    loader: torch.utils.data.DataLoader[Any] = torch.utils.data.DataLoader(
        ds,  # type: ignore[arg-type]  # torch's stub wants a Dataset subclass; any map-style dataset works
        batch_sampler=sampler,
        **_loader_kwargs(cfg, torch.cuda.is_available()),
    )
    return loader, sampler


def val_loader(cfg: PipelineConfig, ds: TileDataset) -> Any:
    return torch.utils.data.DataLoader(
        ds,  # type: ignore[arg-type]  # torch's stub wants a Dataset subclass; any map-style dataset works
        batch_size=cfg.training.batch_size,
        shuffle=False,
        **_loader_kwargs(cfg, torch.cuda.is_available()),
    )
