"""Pre-training data validation through the real DataLoader (guide §10.1): report.json, report.md, sample grid.

The steps, in order: each split's store against the config, then through its plain DataLoader
(`rtscore.data.validation.loader`); spatial blocking between splits and of each ``data.additional_roots`` store
(train data) against val and test (region names and tile ids, then the tiles' footprints on the ground, every pair of
splits: `rtscore.data.splits.blocking`); the normalized train moments; the training
loader as training builds it; the warnings; then the report (`rtscore.data.validation.report`), written whether
the checks passed or not.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.pipeline import PipelineConfig
from rtscore.data.errors import DataValidationError
from rtscore.data.loading.additional_roots import open_additional_roots
from rtscore.data.normalization.stats import NormalizationStats, load_normalization_stats
from rtscore.data.raster.ground import GroundSizeError
from rtscore.data.splits.blocking import (
    TRAIN,
    BlockingError,
    BlockingReport,
    SourceFootprints,
    blocking_problem,
    measure_sources,
    store_footprints,
)
from rtscore.data.splits.regions import SplitResult, read_split_result, val_positives_warning
from rtscore.data.store.format import TileStoreError
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.validation.loader import iterate_split, training_batches
from rtscore.data.validation.report import (
    SPLITS,
    Check,
    CheckLog,
    NormalizedMoments,
    SamplerStage,
    SplitSummary,
    ValidationReport,
    write_report,
)
from rtscore.storage.layout import RunLayout

NORM_TOLERANCE = 0.05
_log = logging.getLogger(__name__)
Moments = tuple[np.ndarray, np.ndarray, np.ndarray]  # per channel: valid pixels, sum, sum of squares
NO_FOOTPRINTS = (
    "the stores carry no tile footprints (synthetic stores, or stores written before footprints were recorded): "
    "spatial blocking is checked by region names and tile ids only"
)


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
) -> ValidationReport:
    """Check every split through its DataLoader; write the report; raise if any check failed.

    Every tile of every split goes through its split's plain (unaugmented) loader; then the training loader
    is checked as training will build it (:func:`~rtscore.data.validation.loader.training_batches`). ``run_dir``
    resolves relative ``data.additional_roots`` (default: the run directory that holds the train store).
    """
    out = CheckLog()
    stats = load_normalization_stats(stats_path, [c.name for c in cfg.channels.extra])
    loader = {"batch_size": batch_size, "num_workers": num_workers, "max_batches": max_batches, "progress": progress}
    run = run_dir if run_dir is not None else _run_dir_of(stores["train"]) if "train" in stores else None
    summaries, moments, blocking = _check_splits(cfg, stores, stats, out, loader, run)
    norm = _check_normalization(cfg, moments.get("train"), stats, out, _partial_pass(summaries, max_batches))
    training: list[SamplerStage] = []
    if "train" in stores and not out.failed:
        assert run is not None
        training = training_batches(cfg, stores["train"], run, stats, out, num_workers)
    derived = _derived_split(run)
    out.warnings += _warnings(cfg, summaries, derived)
    for warning in out.warnings:
        _log.warning(f"data validation: {warning}")
    report = ValidationReport(
        status="failed" if out.failed else "passed",
        derived_split=derived,
        checks=out.checks,
        warnings=out.warnings,
        splits=summaries,
        blocking=blocking,
        normalized_train=norm,
        training_batches=training,
        normalization_stats=str(stats_path),
        mask_type=cfg.data.mask_type,
        channels=cfg.channels.names,
    )
    write_report(report, stores, cfg, out_dir)
    if out.failed:
        raise _failure(out.failed[0], out_dir)
    return report


def _check_splits(
    cfg: PipelineConfig,
    stores: Mapping[str, Path],
    stats: NormalizationStats,
    out: CheckLog,
    loader: dict[str, Any],
    run: Path | None,
) -> tuple[dict[str, SplitSummary], dict[str, Moments | None], BlockingReport]:
    """Each split's store against the config, then through its DataLoader; then spatial blocking between them and
    of the ``data.additional_roots`` stores (resolved against ``run``) against val and test. Returns the per-split
    summaries, the moments of each split's normalized valid pixels and the blocking by geometry."""
    summaries: dict[str, SplitSummary] = {}
    moments: dict[str, Moments | None] = {}
    regions: dict[str, set[str]] = {}
    tile_ids: dict[str, set[str]] = {}
    footprints: dict[str, SourceFootprints | None] = {}
    for split in SPLITS:
        if split not in stores:
            out.add("split_present", False, f"no store for split {split}", split)
            continue
        summaries[split], tile_ids[split], footprints[split] = _check_store(cfg, split, stores[split], out)
        regions[split] = set(summaries[split].regions)
        moments[split] = iterate_split(cfg, split, stores[split], stats, out, summaries[split], **loader)
    roots = _additional_roots(cfg, run, tile_ids.get(TRAIN, set()))
    for name, store in roots.items():
        regions[name] = set(store.metadata.region.tolist())
        footprints[name] = store_footprints(store.metadata.tile_id, store.metadata.bounds, store.crs)
    split_of = dict.fromkeys(roots, TRAIN)
    _check_blocking(regions, tile_ids, split_of, out)
    return summaries, moments, _check_geography(footprints, split_of, cfg.splits.min_distance_m, out)


def _additional_roots(cfg: PipelineConfig, run: Path | None, train_ids: set[str]) -> dict[str, ZarrTileStore]:
    """The ``data.additional_roots`` stores by their key (``data.additional_roots[i]``), opened and checked as
    training opens them; none when there are none, or no run to resolve them against; none either when one is
    refused (missing, another tile size, ...): the training loader check (``training_batches``) fails on it, naming
    it."""
    if not cfg.data.additional_roots or run is None:
        return {}
    try:
        sources = open_additional_roots(cfg, run, sorted(train_ids))
    except TileStoreError:
        return {}
    return {f"data.additional_roots[{i}]": s for i, s in enumerate(sources) if isinstance(s, ZarrTileStore)}


def _check_store(
    cfg: PipelineConfig, split: str, path: Path, out: CheckLog
) -> tuple[SplitSummary, set[str], SourceFootprints | None]:
    """One split's store: its split, tile size, channels, positives (train), regions (val, ``splits.<split>``).
    Returns its summary, its tile ids and its footprints (None: the store records none)."""
    store = ZarrTileStore(path, cfg.data.mask_type, [c.name for c in cfg.channels.extra])
    meta, attrs = store.metadata, store.attrs
    sm = SplitSummary(
        n_tiles=len(meta),
        n_positive=int((meta.is_positive & ~meta.full_nodata).sum()),  # a partition with the two below
        n_negative=int((~meta.is_positive & ~meta.full_nodata).sum()),
        n_full_nodata_excluded=int(meta.full_nodata.sum()),
        prevalence=float(getattr(attrs.prevalence, cfg.data.mask_type)),
        regions=sorted(set(meta.region.tolist())),
        n_mapped_negative=int((meta.mapped_negative & ~meta.full_nodata).sum()) if meta.records_negatives else None,
    )
    out.add("store_split", attrs.split == split, f"store {path} holds split {attrs.split!r}", split)
    out.add(
        "tile_size",
        store.tile_size == cfg.data.tile_size,
        f"tiles {store.tile_size} px, config {cfg.data.tile_size}",
        split,
    )
    out.add("channel_count", len(store.channel_names) == cfg.channels.count, f"channels {store.channel_names}", split)
    if split == "train" and sm.n_positive == 0:
        out.add("train_positives", False, "the train split holds no positive tile", split)
    if split in ("val", "test") and sm.n_positive + sm.n_negative > 0:  # an empty split fails on its own
        # PR-AUC at a prevalence ratio re-weights negatives against positives (guide §10.3): without both it is
        # undefined, and training would fail at its first validation pass, an epoch later
        missing = [k for k, n in (("positive", sm.n_positive), ("negative", sm.n_negative)) if n == 0]
        detail = (
            f"the {split} split holds no {' and no '.join(missing)} tile (of {sm.n_tiles}); its PR-AUC at a "
            "prevalence ratio needs both: give it regions with RTS-free ground (or with RTS)"
            if missing
            else f"{sm.n_positive} positive and {sm.n_negative} negative tiles"
        )
        out.add("both_classes", not missing, detail, split)
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
    return sm, set(meta.tile_id.tolist()), store_footprints(meta.tile_id, meta.bounds, store.crs)


def _partial_pass(summaries: Mapping[str, SplitSummary], max_batches: int | None) -> tuple[int, int] | None:
    """(tiles seen, usable tiles) when a --max-batches pass saw only part of the train split (too few tiles to
    gate the moments on); else None."""
    train = summaries.get("train")
    if train is not None and max_batches is not None and train.tiles_checked < train.n_usable:
        return train.tiles_checked, train.n_usable
    return None


def _warnings(cfg: PipelineConfig, summaries: Mapping[str, SplitSummary], derived: SplitResult | None) -> list[str]:
    """What does not fail validation but the run should hear: few val or test positive tiles (under
    ``splits.min_val_positives`` or ``splits.min_test_positives``, counted on the stores, so a given splits.yaml
    is held to them as a derived split is), a derived split's warnings (e.g. "69% < 70% of positives in
    train", counted on metadata.csv's TrainClass), which are the run's."""
    warnings = []
    if "test" in summaries and summaries["test"].n_positive < cfg.splits.min_test_positives:
        warnings.append(
            f"test split has {summaries['test'].n_positive} positive tiles, fewer than "
            f"splits.min_test_positives={cfg.splits.min_test_positives}: test metrics will be noisy"
        )
    val = summaries.get("val")
    if val is not None and val.n_positive < cfg.splits.min_val_positives:
        warnings.append(f"val store: {val_positives_warning(val.n_positive, cfg.splits.min_val_positives)}")
    if derived is not None:
        warnings += [f"split derived for {derived.derived_from} (no splits.yaml): {w}" for w in derived.warnings]
    return warnings


def _failure(first: Check, out_dir: Path) -> DataValidationError:
    """The first failed check as the one-line error, naming the split, the tile and where the report is."""
    where = "".join(
        [f" in split {first.split}" if first.split else "", f" at tile {first.tile_id}" if first.tile_id else ""]
    )
    return DataValidationError(f"data check '{first.name}' failed{where}: {first.detail} (report: {out_dir})")


def _derived_split(run_dir: Path | None) -> SplitResult | None:
    """The split generate-dataset derived for a GeoTIFF root without splits.yaml, if the run has one."""
    return None if run_dir is None else read_split_result(Path(run_dir) / RunLayout.DERIVED_SPLITS_SUMMARY.at())


def _run_dir_of(train_store: Path) -> Path:
    """The run directory of a train store at its layout place (``<run>/datasets/train.zarr``)."""
    depth = len(Path(RunLayout.DATASET.at(split="train")).parts)
    return Path(train_store).resolve().parents[depth - 1]


def _check_blocking(
    regions: dict[str, set[str]], tile_ids: dict[str, set[str]], split_of: Mapping[str, str], out: CheckLog
) -> None:
    """No region and no tile id in two splits, and no region of an additional root (``split_of``: its split, train)
    in val or test (spatial blocking)."""
    names = list(regions)
    ok = True
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if split_of.get(a, a) == split_of.get(b, b):
                continue  # train and an additional root: both train data (shared ids: open_additional_roots)
            shared = sorted(regions[a] & regions[b])
            if shared:
                ok = out.add("spatial_blocking", False, f"region(s) {shared[:5]} in both {a} and {b}", a)
            dup = sorted(tile_ids.get(a, set()) & tile_ids.get(b, set()))
            if dup:
                ok = out.add("tile_id_overlap", False, f"{len(dup)} tile id(s) in both {a} and {b}", a, dup[0])
    if ok:
        roots = " and of the additional roots against val/test" if split_of else ""
        out.add("spatial_blocking", True, f"no region and no tile id in two splits{roots}")


def _check_geography(
    footprints: Mapping[str, SourceFootprints | None], split_of: Mapping[str, str], buffer_m: float, out: CheckLog
) -> BlockingReport:
    """No two tiles of different splits overlap (train<->val, train<->test, val<->test, each additional root<->val
    and <->test), and no tile of train data lies within ``buffer_m`` ground metres (``splits.min_distance_m``) of a
    val or test tile, judged on the stores' tile footprints (`rtscore.data.splits.blocking`); the report's least
    distance and pairs flagged per pair kind. Stores without footprints (synthetic) are not measured: the splits'
    not at all, an additional root's not against val/test (a warning names it)."""
    found = {s: f for s, f in footprints.items() if f is not None}
    lacking = [s for s in footprints if s not in found and s not in split_of]
    train = found.get(TRAIN)
    splits_found = [s for s in found if s not in split_of]
    if not splits_found:
        return _not_measured(NO_FOOTPRINTS, buffer_m, out)
    if lacking:
        note = (
            f"the {', '.join(lacking)} store(s) carry no tile footprints (synthetic, or written before footprints "
            "were recorded): ground distances are not measured; regenerate them to measure"
        )
        return _not_measured(note, buffer_m, out)
    if train is None or len(splits_found) < 2:
        return _not_measured("fewer than two splits' stores to compare", buffer_m, out)
    crs = train[1]
    if crs is None:
        return _not_measured("the train store records no CRS", buffer_m, out)
    bare = [s for s in split_of if s not in found]
    if bare:
        out.warnings.append(
            f"{', '.join(bare)} carr{'ies' if len(bare) == 1 else 'y'} no tile footprints: checked against val and "
            "test by region names only, not on the ground"
        )
    try:
        report = measure_sources(found, crs, buffer_m, split_of={s: TRAIN for s in split_of if s in found})
    except (BlockingError, GroundSizeError) as err:
        out.add("geographic_blocking", False, str(err))
        return BlockingReport.not_measured(str(err), buffer_m)
    problem = blocking_problem(report)
    if problem is None:
        out.add("geographic_blocking", True, report.summary())
    else:
        first = report.too_close[0]
        out.add("geographic_blocking", False, problem, first.source_b, first.tile_b)
    return report


def _not_measured(note: str, buffer_m: float, out: CheckLog) -> BlockingReport:
    """A passed check that says why the ground was not measured (a buffer that goes unchecked is a warning)."""
    if buffer_m > 0:
        out.warnings.append(f"splits.min_distance_m is {buffer_m:g} m, but {note}: it is not checked")
    out.add("geographic_blocking", True, f"not measured: {note}")
    return BlockingReport.not_measured(note, buffer_m)


def _check_normalization(
    cfg: PipelineConfig, moments: Any, stats: Any, out: CheckLog, partial: tuple[int, int] | None = None
) -> NormalizedMoments | None:
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
    result = NormalizedMoments(channels=cfg.channels.names, mean=mean.round(4).tolist(), std=std.round(4).tolist())
    if partial is not None:
        seen, usable = partial
        out.add(
            "normalized_train",
            True,
            f"mean {result.mean} std {result.std} over {seen} of {usable} train tiles (--max-batches): "
            "not gated; run without --max-batches to check the whole split",
            "train",
        )
        return result
    if stats.clip_min is not None or cfg.normalization.max_tiles is not None:
        out.add("normalized_train", True, f"mean {result.mean} std {result.std} (clipped/subset: not gated)", "train")
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
        + ("; ".join(bad) if bad else f"mean {result.mean}, std {result.std}"),
        "train",
    )
    return result
