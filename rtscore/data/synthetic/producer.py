"""Synthetic tile stores: the scene generator as a tile producer for the store writer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rtscore.config.base import config_hash
from rtscore.config.generation import GenerationConfig
from rtscore.data.store.attrs import StoreAttrs
from rtscore.data.store.format import StoreLayout
from rtscore.data.store.writer import base_attrs, write_store
from rtscore.data.synthetic import plan_tiles, render_context, render_tile
from rtscore.data.tiles import KIND_CODES, RawTile, TilePlan
from rtscore.identity import resume_key


class SyntheticProducer:
    """Renders synthetic scenes; stored tile j is source tile j // R rotated by (j % R) x 90 degrees.

    ``render`` is :func:`render_tile` (the split's store) or :func:`render_context` (its 0.5x context store:
    same plans, same ids, same rotations, so tile j of both stores is the same place)."""

    def __init__(
        self, cfg: GenerationConfig, render: Callable[[TilePlan, GenerationConfig], RawTile] = render_tile
    ) -> None:
        self.cfg = cfg
        self.render = render
        self._plans: list[Any] | None = None

    def batches(self, start: int, stop: int) -> Iterator[tuple[list[RawTile], list[int]]]:
        if self._plans is None:
            self._plans = plan_tiles(self.cfg)
        rot = self.cfg.rotations
        first, last = start // rot, -(-stop // rot)
        step = self.cfg.synthetic_settings.generation_batch_size
        for a in range(first, last, step):
            tiles: list[RawTile] = []
            codes: list[int] = []
            for plan in self._plans[a : min(a + step, last)]:
                tile = self.render(plan, self.cfg)
                for k in range(rot):
                    j = plan.index * rot + k
                    if start <= j < stop:
                        tiles.append(tile.rotated(k))
                        codes.append(KIND_CODES[plan.kind])
            yield tiles, codes


def layout_for(cfg: GenerationConfig) -> StoreLayout:
    return StoreLayout(
        n_tiles=cfg.n_tiles,
        tile_size=cfg.tile_size,
        extra_channel_names=tuple(cfg.synthetic_settings.extra_channels),
        shard_tiles=cfg.store.shard_tiles,
        compressor=cfg.store.compressor,
        clevel=cfg.store.clevel,
        write_noisy=cfg.store.write_noisy_labels,
    )


def _write_synthetic(
    cfg: GenerationConfig,
    output: str | Path,
    producer: SyntheticProducer,
    *,
    scale: float,
    hashes: dict[str, str],
    overwrite: bool,
    restart: bool,
    progress: bool,
    num_workers: int | None,
) -> StoreAttrs:
    """Publish a synthetic store with the attributes every synthetic store carries; ``hashes`` say what it is."""
    attrs = base_attrs(
        split=cfg.split,
        source="synthetic",
        tile_size=cfg.tile_size,
        extra=list(cfg.synthetic_settings.extra_channels),
        mask_types=["exact", "noisy"] if cfg.store.write_noisy_labels else ["exact"],
        dataset_version=cfg.dataset_version,
        scale=scale,
    )
    attrs.update(
        {"config": cfg.model_dump(mode="json"), **hashes, "seed": cfg.seed, "shard_tiles": cfg.store.shard_tiles}
    )
    # Staged shards resume only under the same identity: this module's code closure (the scene renderer
    # included) and the store's config hashes.
    return write_store(
        producer,
        layout_for(cfg),
        Path(output),
        attrs,
        num_workers=num_workers or cfg.processing.num_workers,
        overwrite=overwrite,
        restart=restart,
        progress=progress,
        resume_key=resume_key(__name__, hashes),
    )


def generate_synthetic(
    cfg: GenerationConfig,
    output: str | Path,
    *,
    overwrite: bool = False,
    restart: bool = False,
    progress: bool = False,
    num_workers: int | None = None,
) -> StoreAttrs:
    """`rts generate --source synthetic`: render the configured split into a published tile store."""
    return _write_synthetic(
        cfg,
        output,
        SyntheticProducer(cfg),
        scale=cfg.scale,
        hashes={"config_hash": config_hash(cfg)},
        overwrite=overwrite,
        restart=restart,
        progress=progress,
        num_workers=num_workers,
    )


def generate_synthetic_context(
    cfg: GenerationConfig,
    output: str | Path,
    *,
    overwrite: bool = False,
    restart: bool = False,
    progress: bool = False,
    num_workers: int | None = None,
) -> StoreAttrs:
    """The 0.5x context store of the split ``cfg`` generates (guide §8.3): tile j is the 2x field of view around
    tile j of that split's store, downsampled to ``tile_size`` (:func:`~rtscore.data.synthetic.render_context`),
    under the same tile id. ``context_of`` records the config hash of the 1x store it pairs with."""
    if cfg.scale != 1.0:
        raise ValueError(f"a context store is generated from the 1x config of a split; got scale {cfg.scale}")
    of = config_hash(cfg)
    return _write_synthetic(
        cfg,
        output,
        SyntheticProducer(cfg, render_context),
        scale=0.5,
        hashes={"context_of": of, "config_hash": hashlib.sha256(f"context:{of}".encode()).hexdigest()},
        overwrite=overwrite,
        restart=restart,
        progress=progress,
        num_workers=num_workers,
    )
