"""What the after-training stages share: which seeds are trained, and a seed's model over a split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.dataset import build_dataset
from rtscore.data.loader import val_loader
from rtscore.data.normalization import load_normalization_stats
from rtscore.data.store import read_store_attrs
from rtscore.models import load_model
from rtscore.runtime import select_device
from rtscore.storage import RunDir, RunLayout, StorageError


def trained_seeds(run: RunDir, seeds: list[int] | None) -> list[int]:
    """``seeds`` if each has best weights in the run (else StorageError naming the missing ones); every
    trained seed when ``seeds`` is None."""
    local = {
        int(m["seed"])
        for p in run.at(RunLayout.SEEDS).glob("*")
        if (m := RunLayout.SEED_DIR.match(p.relative_to(run.root).as_posix())) is not None
        and run.at(RunLayout.BEST_WEIGHTS, seed=m["seed"]).is_file()
    }
    recorded: set[int] = set()
    if run.remote:  # another worker trained them: their weights are in the bucket, not (yet) in this mirror
        for rel in run.read_manifest().artifacts:
            m = RunLayout.BEST_WEIGHTS.match(rel)
            if m is not None and int(m["seed"]) not in local and run.has(rel):
                recorded.add(int(m["seed"]))
    found = sorted(local | recorded)
    where = run.at(RunLayout.SEEDS)
    if seeds is None:
        if not found:
            raise StorageError(f"no trained seed under {where}; run train first")
        return found
    missing = [s for s in seeds if s not in found]
    if missing:
        raise StorageError(f"seeds {missing} have no trained weights under {where}; trained seeds: {found}")
    return list(seeds)


def pixel_size_m(store: Path) -> float:
    return float(read_store_attrs(store).get("pixel_size_m", 4.77))


def seed_model_and_loader(run: RunDir, cfg: PipelineConfig, seed: int, split: str) -> tuple[Any, Any, int]:
    """The seed's EMA model on the configured device and a sequential loader over ``split`` (tile count too)."""
    device = select_device(cfg)
    model = load_model(run.at(RunLayout.BEST_WEIGHTS, seed=seed), cfg, device)
    stats = load_normalization_stats(run.at(RunLayout.NORMALIZATION_STATS), [c.name for c in cfg.channels.extra])
    ds = build_dataset(cfg, run.at(RunLayout.DATASET, split=split), stats, train=False)
    return model, val_loader(cfg, ds), len(ds)
