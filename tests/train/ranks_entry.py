"""Entry points the distributed tests launch on each rank (importable by the spawned processes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from rtscore.config.pipeline import PipelineConfig
from rtscore.train import distributed as ddp
from rtscore.train.loop import apply_lr, build_setup, set_train_mode, train_one_epoch
from rtscore.train.schedule import lr_at
from rtscore.train.validate import collect, merge_pools


def steps(cfg: PipelineConfig, run_dir: str, seed: int, epochs: int) -> dict[str, Any] | None:
    """Train ``epochs`` epochs as the loop does; rank 0 returns every step's loss (the global batch's), the logits
    of the first training step's global batch (every rank's rows, gathered), the final weights, and the validation
    pool both sharded-and-merged and collected whole in one process."""
    ranks = ddp.Ranks.from_env()
    s = build_setup(cfg, Path(run_dir), seed, ranks)
    losses: list[float] = []
    first: list[torch.Tensor] = []
    hook = s.model.register_forward_hook(lambda m, _i, out: first.append(out.detach().cpu()) if m.training else None)
    try:
        for epoch in range(1, epochs + 1):
            lr = lr_at(epoch, cfg.lr_schedule, cfg.training.max_epochs)
            apply_lr(s, lr)
            set_train_mode(s, lr.frozen)
            s.sampler.set_epoch(epoch)
            train_one_epoch(s, epoch, on_step=lambda _n, loss: losses.append(loss))
        hook.remove()
        if epochs == 0:  # the initial weights only
            return {"losses": [], "state": {k: v.detach().cpu().clone() for k, v in s.model.state_dict().items()}}
        first_logits = torch.cat(ddp.gather(first[0]))
        merged = merge_pools(ddp.gather(collect(s.model, s.val_loader, cfg, s.device)))
    finally:
        ddp.destroy_process_group()
    if not ranks.main:
        return None
    whole = None
    if ranks.distributed:  # the whole pool in this one process, with the same weights
        from rtscore.data.loading.dataset import build_dataset
        from rtscore.data.loading.loader import val_loader
        from rtscore.data.normalization.stats import load_normalization_stats
        from rtscore.storage import RunLayout

        stats = load_normalization_stats(Path(run_dir) / RunLayout.NORMALIZATION_STATS.at(), ["ndvi"])
        ds = build_dataset(cfg, Path(run_dir) / RunLayout.DATASET.at(split="val"), stats, train=False)
        whole = _pool(collect(s.model, val_loader(cfg, ds), cfg, s.device))
    return {
        "losses": losses,
        "first_logits": first_logits,
        "state": {k: v.detach().cpu().clone() for k, v in s.model.state_dict().items()},
        "merged": _pool(merged),
        "whole": whole,
    }


def _pool(p: Any) -> dict[str, Any]:
    h = p.hist
    return {
        "pos": np.asarray(h.pos),
        "neg": np.asarray(h.neg),
        "tile_ids": list(h.tile_ids),
        "n_valid": np.asarray(h.n_valid),
        "objects": (p.objects.tp.tolist(), p.objects.fn.tolist(), p.objects.n_pos_tiles, p.objects.n_neg_tiles),
    }
