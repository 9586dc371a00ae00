"""What the after-training stages share: which seeds are trained, and a seed's model over a split."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.loading.dataset import build_dataset
from rtscore.data.loading.loader import val_loader
from rtscore.data.normalization.stats import load_normalization_stats
from rtscore.inference.context import ContextError, ContextPairedDataset, check_context_store
from rtscore.models import load_model
from rtscore.runtime import select_device
from rtscore.storage import RunDir, RunLayout, StorageError
from rtscore.train.result import check_trained_model, read_seed_summary


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


def context_store(run: RunDir, split: str) -> Path | None:
    """The split's 0.5x context store (``RunLayout.CONTEXT_DATASET``) if the run has one, else None."""
    rel = RunLayout.CONTEXT_DATASET.at(split=split)
    run.fetch(rel)  # a gs:// run stages a recorded store first
    path = run.path(rel)
    return path if path.exists() else None


def no_context_reason(split: str) -> str:
    """Why a run has no 0.5x input for ``split``, and how to get one."""
    return (
        f"no context-expanded 0.5x {split} store ({RunLayout.CONTEXT_DATASET.at(split=split)}): the synthetic source "
        "writes it for val and test when 0.5 is among calibration.scale_candidates or deployment.scales; a GeoTIFF "
        "data root has none (ingesting 0.5x tiles from a neighbour-aware mosaic of the root is not implemented), "
        "and shrinking the 1x tile is not the guide's 0.5x (guide §8.3)"
    )


def check_seed_model(run: RunDir, cfg: PipelineConfig, seed: int) -> None:
    """Refuse ``cfg`` for the seed's weights when its model section describes another architecture than the seed
    was trained as (:func:`rtscore.train.result.check_trained_model`, from the seed's ``run_summary.json``; a seed
    without one, still training, is not checked here and its weights' load says what does not fit)."""
    rel = RunLayout.SEED_SUMMARY.at(seed=seed)
    run.fetch(rel)  # a gs:// run stages a recorded summary
    if run.path(rel).is_file():
        check_trained_model(read_seed_summary(run.path(rel)), cfg.model, run.at(RunLayout.BEST_WEIGHTS, seed=seed))


def seed_model_and_loader(
    run: RunDir, cfg: PipelineConfig, seed: int, split: str, *, context: bool = False
) -> tuple[Any, Any, int]:
    """The seed's EMA model on the configured device and a sequential loader over ``split`` (tile count too).

    With ``context`` every batch also holds ``context``: each tile's 0.5x input from the split's context store,
    paired by tile id (ContextError when the run has none)."""
    check_seed_model(run, cfg, seed)
    device = select_device(cfg)
    model = load_model(run.at(RunLayout.BEST_WEIGHTS, seed=seed), cfg, device)
    stats = load_normalization_stats(run.at(RunLayout.NORMALIZATION_STATS), [c.name for c in cfg.channels.extra])
    store = run.at(RunLayout.DATASET, split=split)
    ds: Any = build_dataset(cfg, store, stats, train=False)
    if context:
        path = context_store(run, split)
        if path is None:
            raise ContextError(no_context_reason(split))
        check_context_store(store, path)
        ds = ContextPairedDataset(ds, build_dataset(cfg, path, stats, train=False))
    return model, val_loader(cfg, ds), len(ds)
