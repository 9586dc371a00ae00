"""The data validation's DataLoader checks: every batch of a split's plain loader, and the training loader as
training builds it (guide §10.1: iterate the DataLoader)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.loading.dataset import TileDataset, build_dataset, build_train_dataset
from rtscore.data.loading.loader import build_loader, positive_flags, train_loader
from rtscore.data.loading.sampler import BalancedCurriculumSampler, positive_share, realised_ratio
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.tiles import LABEL_VALUES
from rtscore.data.validation.report import CheckLog, SamplerStage, SplitSummary
from rtscore.data.validation.store import StoredPixelAudit, check_store_records, stored_full_nodata
from rtscore.errors import PipelineError


def check_batch(
    batch: Mapping[str, Any],
    split: str,
    n_channels: int,
    tile_size: int,
    out: CheckLog,
    stored_full: Callable[[int], bool],
    emptied: list[str],
) -> bool:
    """Shape, dtype, label-value, finiteness and NoData checks of one collated batch.

    A sample without a valid pixel fails only when its tile is full NoData as stored (``stored_full`` of its
    source index: the exclusion rule let it through); one that augmentation emptied (a sliver of valid pixels
    at a scene edge shifted or scaled out of the tile) is appended to ``emptied``: its labels are all 255, so it
    adds nothing to the loss, and the caller reports it as a warning."""
    import torch

    img, lab, valid, ids = batch["image"], batch["label"], batch["valid"], batch["tile_id"]
    want = (n_channels, tile_size, tile_size)
    if tuple(img.shape[1:]) != want or img.dtype != torch.float32:
        return out.add(
            "image_shape_dtype",
            False,
            f"image {tuple(img.shape[1:])} {img.dtype}, expected {want} float32",
            split,
            ids[0],
        )
    if tuple(lab.shape[1:]) != want[1:] or lab.dtype != torch.int64:
        return out.add(
            "label_shape_dtype",
            False,
            f"label {tuple(lab.shape[1:])} {lab.dtype}, expected {want[1:]} int64",
            split,
            ids[0],
        )
    for i, tid in enumerate(ids):
        bad = np.setdiff1d(torch.unique(lab[i]).numpy(), LABEL_VALUES)
        if bad.size:
            return out.add("label_values", False, f"label values {bad.tolist()} outside {{0, 1, 255}}", split, tid)
        if not torch.isfinite(img[i]).all():
            return out.add("finite_values", False, "non-finite values in the normalized image", split, tid)
        if not bool(valid[i].any()):
            if stored_full(int(batch["index"][i])):
                detail = "a tile that is full NoData as stored reached a batch (data.exclude_full_nodata)"
                return out.add("full_nodata_excluded", False, detail, split, tid)
            emptied.append(str(tid))
    return True


def emptied_warning(epoch: int, tiles: list[str], batch_size: int) -> str:
    """The warning for samples of the training loader's checked batch that augmentation left without a valid
    pixel."""
    return (
        f"training loader, epoch {epoch}: {len(tiles)} of {batch_size} samples of the first batch lost every valid "
        f"pixel to augmentation (tiles {', '.join(tiles[:5])}{', ...' if len(tiles) > 5 else ''}: valid on disk, "
        "few valid pixels); their labels are all 255, so they add nothing to the loss and only take a batch "
        "slot; many such tiles waste training: drop sliver tiles (few valid pixels) when tiling"
    )


def iterate_split(
    cfg: PipelineConfig, split: str, store: Path, stats: Any, out: CheckLog, summary: SplitSummary, **kw: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Run the split's DataLoader (no augmentation); returns per-channel (n, sum, sumsq) of valid pixels.

    The same pass holds each tile's stored pixels against its records (:class:`StoredPixelAudit`, after the
    records-only :func:`check_store_records`); the full-NoData tiles the loader skips are read for it too."""
    ds = build_dataset(cfg, store, stats, train=False, check_values=False, stored_facts=True)  # reported below
    summary.n_usable = len(ds)
    opened = ds.source if isinstance(ds.source, ZarrTileStore) else None  # a legacy npz source has no records
    audit = None if opened is None else StoredPixelAudit(opened)
    if opened is not None:
        check_store_records(opened, split, out)
    if len(ds) == 0:
        out.add("non_empty_split", False, f"split {split} has no usable tiles (store {store})", split)
        return None
    # the loader's own generator (seed 0): the workers' seeds do not depend on, nor advance, torch's global RNG
    loader = build_loader(ds, batch_size=kw["batch_size"], num_workers=kw["num_workers"], seed=0)
    c = cfg.channels.count
    n, s1, s2 = np.zeros(c), np.zeros(c), np.zeros(c)
    ok = True
    batches: Any = loader
    if kw["progress"]:
        from tqdm import tqdm

        batches = tqdm(loader, desc=f"validate {split}", unit="batch")
    stored_full, emptied = stored_full_nodata(ds.source), list[str]()  # emptied: none without augmentation
    for b, batch in enumerate(batches):
        if kw["max_batches"] is not None and b >= kw["max_batches"]:
            break
        ok = check_batch(batch, split, c, cfg.data.tile_size, out, stored_full, emptied)
        if not ok:
            break
        if audit is not None:
            audit.add_batch(batch)
        summary.batches_checked += 1
        summary.tiles_checked += len(batch["tile_id"])
        vals = batch["image"].permute(1, 0, 2, 3)[:, batch["valid"]].double().numpy()
        n += vals.shape[1]
        s1 += vals.sum(axis=1)
        s2 += (vals**2).sum(axis=1)
    if ok:
        out.add("batches", True, f"{summary.tiles_checked} tiles in {summary.batches_checked} batches passed", split)
        if audit is not None and opened is not None:
            audit.add_skipped(opened)
            audit.report(split, out, summary.tiles_checked + int(opened.metadata.full_nodata.sum()))
    return n, s1, s2


def training_batches(
    cfg: PipelineConfig, train_store: Path, run_dir: Path, stats: Any, out: CheckLog, num_workers: int
) -> list[SamplerStage]:
    """What training will see, through the builders training uses (guide §10.1: iterate the DataLoader).

    The training dataset (the train store joined with ``data.additional_roots``, augmented as configured) in the
    training DataLoader (the balanced curriculum batch sampler of ``sampling``, seed ``training.seed``): for the
    first epoch of every curriculum stage, the epoch's batch plan (tile indices only, no
    pixels) must give every batch a positive tile when sampling is balanced (guide §7.2), and its first batch
    is loaded and checked like every other batch. A sample that augmentation left without a valid pixel (its
    stored tile has some) is no failure: it is counted in its stage's row and warned about (its labels are all
    255: it adds nothing to the loss). Returns one row per stage for the report.
    """
    seed = cfg.training.seed
    try:
        ds = build_train_dataset(cfg, run_dir, stats, seed=seed, train_store=train_store)
        loader, sampler = train_loader(cfg, ds, seed, num_workers=num_workers)
    except PipelineError as err:  # e.g. an additional root that is missing or does not match
        out.add("training_batches", False, f"cannot build the training loader: {err}", "train")
        return []
    training = _TrainingLoader.of(ds, loader, sampler)
    rows: list[SamplerStage] = []
    for epoch in (stage.start_epoch for stage in cfg.sampling.curriculum_schedule):
        row, n_pos = training.stage(cfg, epoch)
        rows.append(row)
        if not _plan_holds_positives(cfg, row, n_pos, out):
            return rows
        checked = training.first_batch(cfg, epoch, out)
        if checked is None:
            return rows
        batch, emptied = checked
        if emptied:
            rows[-1] = rows[-1].model_copy(update={"emptied_by_augmentation": emptied})
            out.warnings.append(emptied_warning(epoch, emptied, len(batch["tile_id"])))
        if not training.holds_planned_positives(batch, epoch, n_pos[0], out):
            return rows
    shown = "; ".join(f"epoch {r.epoch} 1:{r.neg_per_pos:g} {list(r.positive_tiles_per_batch)}" for r in rows)
    out.add("training_batches", True, f"training loader, positive tiles per batch: {shown}", "train")
    return rows


@dataclass(frozen=True)
class _TrainingLoader:
    """The training DataLoader and its batch sampler as training builds them, with what the checks know of the
    tiles they draw: which are positive by dataset position (how a batch plan names them) and by source index (how
    a loaded batch does), and which are full NoData as stored."""

    loader: Any
    sampler: BalancedCurriculumSampler
    flags: np.ndarray
    positive_sources: set[int]
    stored_full: Callable[[int], bool]

    @classmethod
    def of(cls, ds: TileDataset, loader: Any, sampler: BalancedCurriculumSampler) -> _TrainingLoader:
        flags = positive_flags(ds)
        positive_sources = {int(i) for i in ds.indices[flags]}
        return cls(loader, sampler, flags, positive_sources, stored_full_nodata(ds.source))

    def stage(self, cfg: PipelineConfig, epoch: int) -> tuple[SamplerStage, list[int]]:
        """The epoch's batch plan (tile indices only, no pixels) as the report's row, and the positive tiles of
        each of its batches."""
        plan = self.sampler.batches(epoch)
        n_pos = [int(sum(self.flags[position] for position, _ in batch)) for batch in plan]
        row = SamplerStage(
            epoch=epoch,
            neg_per_pos=self.sampler.ratio(epoch),
            batches=len(plan),
            batch_size=cfg.training.batch_size,
            positive_tiles_per_batch=(min(n_pos, default=0), max(n_pos, default=0)),
            realised_neg_per_pos=realised_ratio(plan, self.flags) if cfg.sampling.balanced else None,
        )
        return row, n_pos

    def first_batch(self, cfg: PipelineConfig, epoch: int, out: CheckLog) -> tuple[Mapping[str, Any], list[str]] | None:
        """The epoch's first batch, loaded and checked like every other batch (:func:`check_batch`), and the tiles
        whose sample augmentation emptied; None when it failed to load or a check failed."""
        self.sampler.set_epoch(epoch)
        try:
            batch = next(iter(self.loader))
        except PipelineError as err:  # the loader's per-sample check (a bad tile of an additional root, say)
            out.add("training_batches", False, f"epoch {epoch}: {err}", "train")
            return None
        emptied: list[str] = []
        if not check_batch(batch, "train", cfg.channels.count, cfg.data.tile_size, out, self.stored_full, emptied):
            return None
        return batch, emptied

    def holds_planned_positives(self, batch: Mapping[str, Any], epoch: int, planned: int, out: CheckLog) -> bool:
        """Whether the loaded batch holds the positive tiles its plan gave it: the loader draws what the sampler
        planned (a failed check when not)."""
        loaded = sum(int(i) in self.positive_sources for i in batch["index"])
        if loaded != planned:
            detail = f"epoch {epoch}: the loader's first batch holds {loaded} positive tiles, its plan {planned}"
            out.add("training_batches", False, detail, "train")
            return False
        return True


def _plan_holds_positives(cfg: PipelineConfig, row: SamplerStage, n_pos: list[int], out: CheckLog) -> bool:
    """Whether a balanced epoch's plan gives every batch a positive tile (guide §7.2), which fails the check
    (False) when the ratio asks for at least one a batch; under one a batch, an exact ratio leaves some batches
    without one, which is only warned about."""
    epoch, ratio = row.epoch, row.neg_per_pos
    empty = [k for k, n in enumerate(n_pos) if n == 0]
    per_batch = cfg.training.batch_size * positive_share(cfg.sampling.positive_fraction, ratio)
    if cfg.sampling.balanced and empty and per_batch >= 1:
        detail = f"epoch {epoch} (1:{ratio:g}): batch {empty[0]} of {row.batches} holds no positive tile"
        out.add("training_batches", False, detail, "train")
        return False
    if cfg.sampling.balanced and empty:  # an exact ratio under one positive a batch leaves some without one
        out.warnings.append(
            f"training loader, epoch {epoch} (1:{ratio:g}): {per_batch:.2f} positive tiles a batch at "
            f"training.batch_size {cfg.training.batch_size}, so {len(empty)} of {row.batches} batches hold none "
            "(the ratio over the epoch is exact); a larger batch gives every batch a positive (guide §7.2)"
        )
    return True
