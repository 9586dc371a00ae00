"""Pre-training data validation through the real DataLoader (guide §10.1): report.json, report.md, sample grid."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.dataset import build_dataset, build_train_dataset, make_loader
from rtscore.data.errors import DataValidationError
from rtscore.data.loader import positive_flags, train_loader
from rtscore.data.normalization import load_normalization_stats
from rtscore.data.sample_grid import write_sample_grid
from rtscore.data.splits import SplitResult, read_split_result
from rtscore.data.store import ZarrTileStore
from rtscore.data.tiles import LABEL_VALUES
from rtscore.errors import PipelineError
from rtscore.storage import atomic_write_json, atomic_write_text
from rtscore.storage.layout import SAMPLES, RunLayout

NORM_TOLERANCE = 0.05
SPLITS = ("train", "val", "test")


@dataclass
class Check:
    name: str
    passed: bool
    detail: str
    split: str | None = None
    tile_id: str | None = None


@dataclass
class SplitSummary:
    n_tiles: int = 0
    n_usable: int = 0
    n_positive: int = 0
    n_negative: int = 0
    n_full_nodata_excluded: int = 0
    prevalence: float = 0.0
    regions: list[str] = field(default_factory=list)
    batches_checked: int = 0
    tiles_checked: int = 0


class _Collector:
    def __init__(self) -> None:
        self.checks: list[Check] = []
        self.warnings: list[str] = []

    def add(self, name: str, ok: bool, detail: str, split: str | None = None, tile: str | None = None) -> bool:
        self.checks.append(Check(name, bool(ok), detail, split, tile))
        return ok

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]


def _check_batch(batch: Mapping[str, Any], split: str, n_channels: int, tile_size: int, out: _Collector) -> bool:
    """Shape, dtype, label-value, finiteness and NoData checks of one collated batch."""
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
            return out.add("full_nodata_excluded", False, "a full-NoData tile reached a batch", split, tid)
    return True


def _iterate_split(
    cfg: PipelineConfig, split: str, store: Path, stats: Any, out: _Collector, summary: SplitSummary, **kw: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Run the split's DataLoader (no augmentation); returns per-channel (n, sum, sumsq) of valid pixels."""
    ds = build_dataset(cfg, store, stats, train=False, check_values=False)  # reported below, per tile
    summary.n_usable = len(ds)
    if len(ds) == 0:
        out.add("non_empty_split", False, f"split {split} has no usable tiles (store {store})", split)
        return None
    loader = make_loader(ds, batch_size=kw["batch_size"], shuffle=False, num_workers=kw["num_workers"])
    c = cfg.channels.count
    n, s1, s2 = np.zeros(c), np.zeros(c), np.zeros(c)
    ok = True
    batches: Any = loader
    if kw["progress"]:
        from tqdm import tqdm

        batches = tqdm(loader, desc=f"validate {split}", unit="batch")
    for b, batch in enumerate(batches):
        if kw["max_batches"] is not None and b >= kw["max_batches"]:
            break
        ok = _check_batch(batch, split, c, cfg.data.tile_size, out)
        if not ok:
            break
        summary.batches_checked += 1
        summary.tiles_checked += len(batch["tile_id"])
        vals = batch["image"].permute(1, 0, 2, 3)[:, batch["valid"]].double().numpy()
        n += vals.shape[1]
        s1 += vals.sum(axis=1)
        s2 += (vals**2).sum(axis=1)
    if ok:
        out.add("batches", True, f"{summary.tiles_checked} tiles in {summary.batches_checked} batches passed", split)
    return n, s1, s2


def _training_batches(
    cfg: PipelineConfig, train_store: Path, run_dir: Path, stats: Any, out: _Collector, num_workers: int
) -> list[dict[str, Any]]:
    """What training will see, through the builders training uses (guide §10.1: iterate the DataLoader).

    The training dataset (the train store joined with ``data.additional_roots``, augmented as configured) in the
    training DataLoader (the balanced curriculum batch sampler of ``sampling``, seed ``training.seed``): for the
    first epoch of every curriculum stage, the epoch's batch plan (tile indices only, no
    pixels) must give every batch a positive tile when sampling is balanced (guide §7.2), and its first batch
    is loaded and checked like every other batch. Returns one row per stage for the report.
    """
    seed = cfg.training.seed
    try:
        ds = build_train_dataset(cfg, run_dir, stats, seed=seed, train_store=train_store)
        loader, sampler = train_loader(cfg, ds, seed, num_workers=num_workers)
    except PipelineError as err:  # e.g. an additional root that is missing or does not match
        out.add("training_batches", False, f"cannot build the training loader: {err}", "train")
        return []
    flags = positive_flags(ds)
    positive_sources = {int(i) for i in ds.indices[flags]}
    rows: list[dict[str, Any]] = []
    for epoch in (stage.start_epoch for stage in cfg.sampling.curriculum_schedule):
        plan = sampler.batches(epoch)
        n_pos = [int(sum(flags[position] for position, _ in batch)) for batch in plan]
        ratio = sampler.ratio(epoch)
        rows.append(
            {
                "epoch": epoch,
                "neg_per_pos": ratio,
                "batches": len(plan),
                "batch_size": cfg.training.batch_size,
                "positive_tiles_per_batch": [min(n_pos, default=0), max(n_pos, default=0)],
            }
        )
        empty = next((k for k, n in enumerate(n_pos) if n == 0), None)
        if cfg.sampling.balanced and empty is not None:
            detail = f"epoch {epoch} (1:{ratio:g}): batch {empty} of {len(plan)} holds no positive tile"
            out.add("training_batches", False, detail, "train")
            return rows
        sampler.set_epoch(epoch)
        try:
            batch = next(iter(loader))
        except PipelineError as err:  # the loader's per-sample check (a bad tile of an additional root, say)
            out.add("training_batches", False, f"epoch {epoch}: {err}", "train")
            return rows
        if not _check_batch(batch, "train", cfg.channels.count, cfg.data.tile_size, out):
            return rows
        loaded = sum(int(i) in positive_sources for i in batch["index"])
        if loaded != n_pos[0]:
            detail = f"epoch {epoch}: the loader's first batch holds {loaded} positive tiles, its plan {n_pos[0]}"
            out.add("training_batches", False, detail, "train")
            return rows
    shown = "; ".join(f"epoch {r['epoch']} 1:{r['neg_per_pos']:g} {r['positive_tiles_per_batch']}" for r in rows)
    out.add("training_batches", True, f"training loader, positive tiles per batch: {shown}", "train")
    return rows


def validate_data(
    cfg: PipelineConfig,
    stores: Mapping[str, Path],
    stats_path: Path,
    out_dir: Path,
    *,
    batch_size: int = 8,
    num_workers: int = 0,
    max_batches: int | None = None,
    progress: bool = False,
    run_dir: Path | None = None,
) -> dict[str, Any]:
    """Check every split through its DataLoader; write the report; raise if any check failed.

    Every tile of every split goes through its split's plain (unaugmented) loader; then the training loader
    is checked as training will build it (:func:`_training_batches`). ``run_dir`` resolves relative
    ``data.additional_roots`` (default: the run directory that holds the train store).
    """
    out = _Collector()
    extra = [c.name for c in cfg.channels.extra]
    stats = load_normalization_stats(stats_path, extra)
    summaries: dict[str, SplitSummary] = {}
    moments: dict[str, Any] = {}
    regions: dict[str, set[str]] = {}
    tile_ids: dict[str, set[str]] = {}
    for split in SPLITS:
        if split not in stores:
            out.add("split_present", False, f"no store for split {split}", split)
            continue
        store = ZarrTileStore(stores[split], cfg.data.mask_type, extra)
        meta, attrs = store.metadata, store.attrs
        summaries[split] = sm = SplitSummary(
            n_tiles=len(meta),
            n_positive=int(meta.is_positive.sum()),
            n_negative=int((~meta.is_positive & ~meta.full_nodata).sum()),
            n_full_nodata_excluded=int(meta.full_nodata.sum()),
            prevalence=float(attrs["prevalence"][cfg.data.mask_type]),
            regions=sorted(set(meta.region.tolist())),
        )
        regions[split], tile_ids[split] = set(sm.regions), set(meta.tile_id.tolist())
        out.add("store_split", attrs["split"] == split, f"store {stores[split]} holds split {attrs['split']!r}", split)
        out.add(
            "tile_size",
            store.tile_size == cfg.data.tile_size,
            f"tiles {store.tile_size} px, config {cfg.data.tile_size}",
            split,
        )
        out.add(
            "channel_count", len(store.channel_names) == cfg.channels.count, f"channels {store.channel_names}", split
        )
        if split == "train" and sm.n_positive == 0:
            out.add("train_positives", False, "the train split holds no positive tile", split)
        if split == "val":
            need = cfg.splits.min_val_regions
            out.add(
                "val_regions",
                len(sm.regions) >= need,
                f"val spans {len(sm.regions)} region(s) {sm.regions}; splits.min_val_regions is {need}",
                split,
            )
        configured = getattr(cfg.splits, split)
        if configured is not None:
            stray = sorted(set(sm.regions) - set(configured))
            out.add("configured_regions", not stray, f"regions {stray} not in splits.{split}" if stray else "ok", split)
        moments[split] = _iterate_split(
            cfg,
            split,
            stores[split],
            stats,
            out,
            sm,
            batch_size=batch_size,
            num_workers=num_workers,
            max_batches=max_batches,
            progress=progress,
        )
    _check_blocking(regions, tile_ids, out)
    train = summaries.get("train")
    partial = None  # a --max-batches pass saw only part of the train split: too few tiles to gate the moments
    if train is not None and max_batches is not None and train.tiles_checked < train.n_usable:
        partial = (train.tiles_checked, train.n_usable)
    norm = _check_normalization(cfg, moments.get("train"), stats, out, partial)
    training: list[dict[str, Any]] = []
    if "train" in stores and not out.failed:
        train_run = run_dir if run_dir is not None else _run_dir_of(stores["train"])
        training = _training_batches(cfg, stores["train"], train_run, stats, out, num_workers)
    if "test" in summaries and summaries["test"].n_positive < cfg.splits.min_test_positives:
        out.warnings.append(
            f"test split has {summaries['test'].n_positive} positive tiles, fewer than "
            f"splits.min_test_positives={cfg.splits.min_test_positives}: test metrics will be noisy"
        )
    derived = _derived_split(
        run_dir if run_dir is not None else _run_dir_of(stores["train"]) if "train" in stores else None
    )
    if derived is not None:  # the derivation's warnings (e.g. "69% < 70% of positives in train") are the run's
        out.warnings += [f"split derived for {derived.derived_from} (no splits.yaml): {w}" for w in derived.warnings]
    report = {
        "status": "failed" if out.failed else "passed",
        "derived_split": None if derived is None else derived.model_dump(mode="json"),
        "checks": [asdict(c) for c in out.checks],
        "warnings": out.warnings,
        "splits": {k: asdict(v) for k, v in summaries.items()},
        "normalized_train": norm,
        "training_batches": training,
        "normalization_stats": str(stats_path),
        "mask_type": cfg.data.mask_type,
        "channels": cfg.channels.names,
    }
    write_report(report, stores, stats, cfg, out_dir)
    if out.failed:
        first = out.failed[0]
        where = "".join(
            [f" in split {first.split}" if first.split else "", f" at tile {first.tile_id}" if first.tile_id else ""]
        )
        raise DataValidationError(f"data check '{first.name}' failed{where}: {first.detail} (report: {out_dir})")
    return report


def _derived_split(run_dir: Path | None) -> SplitResult | None:
    """The split generate-dataset derived for a GeoTIFF root without splits.yaml, if the run has one."""
    return None if run_dir is None else read_split_result(Path(run_dir) / RunLayout.DERIVED_SPLITS_SUMMARY.at())


def _run_dir_of(train_store: Path) -> Path:
    """The run directory of a train store at its layout place (``<run>/datasets/train.zarr``)."""
    depth = len(Path(RunLayout.DATASET.at(split="train")).parts)
    return Path(train_store).resolve().parents[depth - 1]


def _check_blocking(regions: dict[str, set[str]], tile_ids: dict[str, set[str]], out: _Collector) -> None:
    names = list(regions)
    ok = True
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            shared = sorted(regions[a] & regions[b])
            if shared:
                ok = out.add("spatial_blocking", False, f"region(s) {shared[:5]} in both {a} and {b}", a)
            dup = sorted(tile_ids[a] & tile_ids[b])
            if dup:
                ok = out.add("tile_id_overlap", False, f"{len(dup)} tile id(s) in both {a} and {b}", a, dup[0])
    if ok:
        out.add("spatial_blocking", True, "no region and no tile id in two splits")


def _check_normalization(
    cfg: PipelineConfig, moments: Any, stats: Any, out: _Collector, partial: tuple[int, int] | None = None
) -> dict[str, Any] | None:
    """Normalized train pixels must have mean ~0 and std ~1 (+-NORM_TOLERANCE) over the whole split.

    The moments of a subset of tiles (``partial`` = (tiles seen, usable tiles), from --max-batches) scatter
    by far more than the tolerance, tile to tile: the check then reports them without gating.
    """
    if moments is None:
        return None
    n, s1, s2 = moments
    if (n == 0).any():
        out.add("normalized_train", False, "no valid train pixels were seen", "train")
        return None
    mean = s1 / n
    std = np.sqrt(np.maximum(s2 / n - mean**2, 0.0))
    result = {"channels": cfg.channels.names, "mean": mean.round(4).tolist(), "std": std.round(4).tolist()}
    if partial is not None:
        seen, usable = partial
        out.add(
            "normalized_train",
            True,
            f"mean {result['mean']} std {result['std']} over {seen} of {usable} train tiles (--max-batches): "
            "not gated; run without --max-batches to check the whole split",
            "train",
        )
        return result
    if stats.clip_min is not None or cfg.normalization.max_tiles is not None:
        out.add(
            "normalized_train", True, f"mean {result['mean']} std {result['std']} (clipped/subset: not gated)", "train"
        )
        return result
    bad = [
        f"{name}: mean {m:+.3f}, std {s:.3f}"
        for name, m, s in zip(cfg.channels.names, mean, std, strict=True)
        if abs(m) > NORM_TOLERANCE or abs(s - 1.0) > NORM_TOLERANCE
    ]
    out.add(
        "normalized_train",
        not bad,
        f"expected mean ~0 and std ~1 (+-{NORM_TOLERANCE}); "
        + ("; ".join(bad) if bad else f"mean {result['mean']}, std {result['std']}"),
        "train",
    )
    return result


def write_report(
    report: dict[str, Any], stores: Mapping[str, Path], stats: Any, cfg: PipelineConfig, out_dir: Path
) -> None:
    """report.json, report.md and samples.png, each written atomically."""
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out_dir / "report.json", report)
    atomic_write_text(out_dir / "report.md", render_markdown(report))
    write_sample_grid({k: v for k, v in stores.items() if k in SPLITS}, cfg, out_dir / SAMPLES)


def render_markdown(report: dict[str, Any]) -> str:
    lines = [f"# Data validation: {report['status'].upper()}", ""]
    lines += [
        "| split | tiles | usable | positive | negative | full NoData excluded | prevalence | regions |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for split, s in report["splits"].items():
        lines.append(
            f"| {split} | {s['n_tiles']} | {s['n_usable']} | {s['n_positive']} | {s['n_negative']} | "
            f"{s['n_full_nodata_excluded']} | {s['prevalence']:.5f} | {len(s['regions'])} |"
        )
    norm = report.get("normalized_train")
    if norm:
        lines += [
            "",
            "Normalized train pixels (valid only): "
            + ", ".join(
                f"{c} {m:+.3f}/{s:.3f}" for c, m, s in zip(norm["channels"], norm["mean"], norm["std"], strict=True)
            ),
        ]
    if report.get("training_batches"):
        lines += [
            "",
            "Training loader (balanced curriculum sampler, first epoch of each stage):",
            "",
            "| epoch | neg:pos | batches | batch size | positive tiles per batch (min, max) |",
            "|---|---|---|---|---|",
        ]
        for r in report["training_batches"]:
            lo, hi = r["positive_tiles_per_batch"]
            lines.append(f"| {r['epoch']} | 1:{r['neg_per_pos']:g} | {r['batches']} | {r['batch_size']} | {lo}, {hi} |")
    lines += ["", "| check | split | result | detail |", "|---|---|---|---|"]
    for c in report["checks"]:
        where = c["split"] or ""
        if c["tile_id"]:
            where += f" / {c['tile_id']}"
        lines.append(f"| {c['name']} | {where} | {'pass' if c['passed'] else 'FAIL'} | {c['detail']} |")
    if report["warnings"]:
        lines += ["", "Warnings:", *[f"- {w}" for w in report["warnings"]]]
    if report.get("derived_split"):
        derived = SplitResult.model_validate(report["derived_split"])
        lines += ["", f"Split derived from {derived.derived_from} (no splits.yaml there):", "", derived.summary()]
    lines += ["", f"![samples]({SAMPLES})", ""]
    return "\n".join(lines)
