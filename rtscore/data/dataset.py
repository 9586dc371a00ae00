"""Torch Dataset over any tile source: NoData, normalization and augmentation applied per sample."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from rtscore.config.binding import InputBinding, binding_conflicts
from rtscore.data.legacy_npz import BatchedNpzSource
from rtscore.data.normalization import NormalizationStats, NormalizationStatsError
from rtscore.data.store import TileMetadata, ZarrTileStore
from rtscore.data.store_format import TileStoreError, read_store_attrs
from rtscore.data.tiles import IGNORE_INDEX, ClassPixelCounts, StoredSample
from rtscore.data.transforms import SamplePipeline
from rtscore.errors import PipelineError
from rtscore.storage.layout import RunLayout

if TYPE_CHECKING:
    import torch

    from rtscore.config.pipeline import PipelineConfig


class SampleValueError(PipelineError, ValueError):
    """A tile holds values training cannot use (labels outside {0, 1, 255}, non-finite inputs); the message
    names the tile and where it is stored."""


class TileSource(Protocol):
    """Anything with ``__len__`` and ``__getitem__`` returning :class:`StoredSample` (Zarr, legacy npz, ...)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int) -> StoredSample: ...


class ConcatSource:
    """Tile sources joined end to end (joint training on several train stores, guide §8.3).

    Position ``i`` is tile ``i - offset[k]`` of source ``k``. ``metadata`` concatenates the sources' metadata
    (None unless every source has some), so :func:`usable_indices` and the balanced sampler see the tiles of
    all of them. Pickles without open file handles when its sources do (each Zarr store reopens per process).
    """

    def __init__(self, sources: Sequence[TileSource]) -> None:
        if not sources:
            raise ValueError("ConcatSource needs at least one source")
        self.sources = list(sources)
        names = [getattr(src, "channel_names", None) for src in self.sources]
        known = [list(n) for n in names if n is not None]
        if any(n != known[0] for n in known):
            raise ValueError(f"joined tile sources have different channels: {known}")
        self.channel_names: list[str] | None = known[0] if len(known) == len(names) else None
        self.offsets = np.cumsum([0, *(len(src) for src in self.sources)])
        self._meta: TileMetadata | None = None

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def locate(self, index: int) -> tuple[int, int]:
        """(source number, index within that source) of a position of the join."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"tile index {index} out of range for {n} tiles in {len(self.sources)} joined sources")
        i = int(index) % n
        k = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return k, i - int(self.offsets[k])

    def __getitem__(self, index: int) -> StoredSample:
        k, j = self.locate(index)
        sample = self.sources[k][j]
        return dataclasses.replace(sample, index=int(self.offsets[k]) + j)

    @property
    def metadata(self) -> TileMetadata | None:
        if self._meta is None:
            metas = [getattr(src, "metadata", None) for src in self.sources]
            known = [m for m in metas if m is not None]
            if len(known) != len(metas):
                return None
            self._meta = concat_metadata(known)
        return self._meta


def concat_metadata(metas: Sequence[TileMetadata]) -> TileMetadata:
    """The per-tile metadata of sources joined in this order (they must share the tile size)."""
    sizes = sorted({m.tile_size for m in metas})
    if len(sizes) != 1:
        raise ValueError(f"joined tile sources have different tile sizes: {sizes}")
    fields = (
        "tile_id",
        "region",
        "kind",
        "is_positive",
        "n_positive_px",
        "n_ignore_px",
        "n_nodata_px",
        "pixel_area_m2",
    )
    joined = {f: np.concatenate([np.asarray(getattr(m, f)) for m in metas]) for f in fields}
    return TileMetadata(**joined, tile_size=sizes[0])


def usable_indices(source: TileSource, exclude_full_nodata: bool = True) -> np.ndarray:
    """Indices that may enter a batch: full-NoData tiles are skipped at the dataset level (guide §4.4)."""
    meta = getattr(source, "metadata", None)
    if meta is not None:
        keep = ~meta.full_nodata if exclude_full_nodata else np.ones(len(meta), bool)
        return np.flatnonzero(keep)
    if not exclude_full_nodata:
        return np.arange(len(source))
    return np.array([i for i in range(len(source)) if (source[i].alpha > 0).any()], dtype=np.int64)


def class_pixel_counts(source: TileSource, indices: Sequence[int] | np.ndarray) -> ClassPixelCounts:
    """Background and RTS pixels of the tiles at ``indices`` (the pixels training counts: valid, not ignored).

    From the tile metadata when the source has it (no pixel read): RTS = ``n_positive_px``, background =
    ``H*W - n_positive_px - max(n_ignore_px, n_nodata_px)``. That is exact when a tile's NoData pixels are
    labelled 255 (synthetic stores) or when its only ignored pixels are NoData (training ignores NoData whatever
    its label); for a tile with both kinds apart it is within ``min(n_ignore_px, n_nodata_px)`` pixels. Without
    metadata (legacy npz), every tile's labels and alpha are read.
    """
    idx = np.asarray(indices, dtype=np.int64)
    meta = getattr(source, "metadata", None)
    if meta is not None:
        pos = np.asarray(meta.n_positive_px, dtype=np.int64)[idx]
        ignored = np.maximum(np.asarray(meta.n_ignore_px, np.int64)[idx], np.asarray(meta.n_nodata_px, np.int64)[idx])
        bg = meta.tile_size * meta.tile_size - pos - ignored
        return ClassPixelCounts(background=int(np.maximum(bg, 0).sum()), rts=int(pos.sum()))
    background = rts = 0
    for i in idx:
        s = source[int(i)]
        label = np.where(s.alpha == 0, IGNORE_INDEX, s.label)
        background += int((label == 0).sum())
        rts += int((label == 1).sum())
    return ClassPixelCounts(background=background, rts=rts)


class TileDataset:
    """Map-style dataset yielding dicts of tensors; index may be ``int`` or ``(int, augmentation_seed)``.

    Samples: ``image`` float32 (C, H, W) normalized, ``label`` int64 (H, W) in {0, 1, 255},
    ``valid`` bool (H, W), ``index`` (position in the source), ``tile_id``, ``region``, ``pixel_area_m2`` (the
    tile's ground m² per pixel: object areas and the large-RTS rule are per tile).
    """

    def __init__(
        self,
        source: TileSource,
        stats: NormalizationStats,
        *,
        augmentation: Any = None,
        nodata_handling: bool = True,
        boundary_handling: Literal["none", "ignore", "soft_labels"] = "none",
        boundary_ignore_width: int = 0,
        exclude_full_nodata: bool = True,
        indices: Sequence[int] | None = None,
        seed: int = 0,
        check_values: bool = True,
    ) -> None:
        self.source = source
        self.stats = stats
        self.check_values = check_values  # off only where the caller reports these checks itself (validation)
        names = getattr(source, "channel_names", None)
        if names is not None and list(names) != list(stats.channel_names):
            raise NormalizationStatsError(
                f"normalization stats {stats.source} are for channels {stats.channel_names}, "
                f"but the data source has {list(names)}"
            )
        self.indices = np.asarray(indices if indices is not None else usable_indices(source, exclude_full_nodata))
        self.seed = seed
        self.epoch = 0
        self.pipeline = SamplePipeline(
            mean=stats.mean.tolist(),
            std=stats.std.tolist(),
            augmentation=augmentation,
            nodata_handling=nodata_handling,
            boundary_handling=boundary_handling,
            boundary_ignore_width=boundary_ignore_width,
            clip_min=None if stats.clip_min is None else stats.clip_min.tolist(),
            clip_max=None if stats.clip_max is None else stats.clip_max.tolist(),
        )
        self.augmenting = augmentation is not None and getattr(augmentation, "enabled", True)

    def __len__(self) -> int:
        return int(self.indices.size)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _sample_seed(self, position: int) -> int:
        return int(np.random.SeedSequence([self.seed, self.epoch, position]).generate_state(1)[0])

    def __getitem__(self, item: int | tuple[int, int]) -> dict[str, Any]:
        import torch

        position, aug_seed = item if isinstance(item, tuple) else (item, None)
        src_index = int(self.indices[position])
        s = self.source[src_index]
        seed = None
        if self.augmenting:
            seed = aug_seed if aug_seed is not None else self._sample_seed(position)
        # Clipping, NoData fill and normalisation: the pipeline's InputTransform, as in predict and drift.
        image, label, valid = self.pipeline(s.rgb, s.extra, s.alpha, s.label, seed)
        if self.check_values:
            check_sample(s, image, self.source, self.stats.channel_names)
        return {
            "image": torch.from_numpy(np.ascontiguousarray(image, dtype=np.float32)),
            "label": torch.from_numpy(np.ascontiguousarray(label, dtype=np.int64)),
            "valid": torch.from_numpy(np.ascontiguousarray(valid, dtype=bool)),
            "index": src_index,
            "tile_id": s.tile_id,
            "region": s.region,
            "pixel_area_m2": float(s.pixel_area_m2),
        }


def check_sample(sample: StoredSample, image: np.ndarray, source: TileSource, channels: Sequence[str]) -> None:
    """What data validation checks, on every sample the loader yields (so training never starts on them
    unvalidated): stored labels in {0, 1, 255} and a finite model input. Vectorised; about a millisecond
    for a 512 px tile.

    Raises:
        SampleValueError: naming the tile, its index and its store (or source), and what was found.
    """
    label = sample.label
    bad_label = (label > 1) & (label != IGNORE_INDEX)
    if bad_label.any():
        values = np.unique(label[bad_label]).tolist()
        raise SampleValueError(
            f"tile {sample.tile_id} ({where_stored(source, sample.index)}): label values {values} outside "
            "{0, 1, 255} in the stored labels; fix the labels and regenerate the store (rts validate checks all)"
        )
    finite = np.isfinite(image)
    if not finite.all():
        per_channel = (~finite).reshape(image.shape[0], -1).sum(axis=1)
        names = [f"{channels[c] if c < len(channels) else c} ({int(n)} px)" for c, n in enumerate(per_channel) if n]
        raise SampleValueError(
            f"tile {sample.tile_id} ({where_stored(source, sample.index)}): non-finite values (NaN or inf) in "
            f"the model input, channels {', '.join(names)}; the stored bands hold NaN/inf in valid pixels "
            "(mark them NoData in the alpha band, or fill them) and regenerate the store"
        )


def where_stored(source: TileSource, index: int) -> str:
    """``store <path>, index i`` of a position of ``source`` (a joined source names the member store)."""
    if isinstance(source, ConcatSource):
        k, j = source.locate(index)
        return where_stored(source.sources[k], j)
    path = getattr(source, "path", None)
    return f"index {index} of {'store ' + str(path) if path is not None else type(source).__name__}"


def open_source(path: str | Path, mask_type: str = "exact", extra_channels: list[str] | None = None) -> TileSource:
    """Open a Zarr store, or a legacy batched-npz directory, by what is at ``path``."""
    p = Path(path)
    if (p / "metadata.json").is_file() and not (p / "zarr.json").is_file():
        return BatchedNpzSource(p)
    return ZarrTileStore(p, mask_type=mask_type, extra_channels=extra_channels)


def build_dataset(
    cfg: PipelineConfig,
    store: str | Path | TileSource,
    stats: NormalizationStats,
    *,
    train: bool,
    seed: int = 0,
    check_values: bool = True,
) -> TileDataset:
    """The dataset of one split as the config says (augmentation only when ``train``).

    ``store`` is a path (opened with :func:`open_source`) or an already opened source (e.g. a ConcatSource).
    ``check_values`` (:func:`check_sample` on every sample) is off only for data validation, which reports
    the same checks per tile in its report instead of stopping at the first.
    """
    if isinstance(store, str | Path):
        source = open_source(store, cfg.data.mask_type, [c.name for c in cfg.channels.extra])
    else:
        source = store
    return TileDataset(
        source,
        stats,
        augmentation=cfg.augmentation if train and cfg.augmentation.enabled else None,
        nodata_handling=cfg.data.nodata_handling,
        boundary_handling=cfg.loss.boundary_handling,
        boundary_ignore_width=cfg.loss.boundary_ignore_width,
        exclude_full_nodata=cfg.data.exclude_full_nodata,
        seed=seed,
        check_values=check_values,
    )


def resolve_additional_roots(cfg: PipelineConfig, run_dir: str | Path) -> list[Path]:
    """The stores of ``data.additional_roots``: relative entries against the run directory, absolute as is."""
    run = Path(run_dir)
    return [p if p.is_absolute() else run / p for p in (Path(e).expanduser() for e in cfg.data.additional_roots)]


def open_additional_roots(cfg: PipelineConfig, run_dir: str | Path, train_ids: Sequence[str] = ()) -> list[TileSource]:
    """Check and open every ``data.additional_roots`` store, before any training step.

    Each must be a published Zarr tile store of the train split with ``data.tile_size`` tiles, the configured
    label variant and every extra channel of ``channels.extra``, and share no tile id with ``train_ids`` (the
    train store's) or with another additional store (the same data joined twice).

    Raises:
        TileStoreError: naming ``data.additional_roots[i]``, the entry and the resolved path.
    """
    extra = [c.name for c in cfg.channels.extra]
    seen = {str(t): RunLayout.DATASET.at(split="train") for t in train_ids}
    sources: list[TileSource] = []
    for i, path in enumerate(resolve_additional_roots(cfg, run_dir)):
        entry = cfg.data.additional_roots[i]
        where = f"data.additional_roots[{i}] = {entry!r}"
        where += "" if Path(entry).is_absolute() else f" (resolved against the run directory: {path})"

        def fail(problem: str, where: str = where) -> TileStoreError:
            return TileStoreError(f"{where}: {problem}")

        if not path.exists():
            raise fail("does not exist; generate the store there or fix the path")
        try:
            attrs = read_store_attrs(path)
        except TileStoreError as err:
            raise fail(f"not a published tile store ({err})") from None
        if attrs.get("split") != "train":
            raise fail(f"the store holds the {attrs.get('split')!r} split; additional roots must be train stores")
        if int(attrs.get("tile_size", -1)) != cfg.data.tile_size:
            raise fail(f"the store has {attrs.get('tile_size')} px tiles; data.tile_size is {cfg.data.tile_size}")
        stored = list(attrs.get("extra_channel_names", []))
        missing = [c for c in extra if c not in stored]
        if missing:
            raise fail(f"the store lacks extra channels {missing} named in channels.extra (it has {stored})")
        conflicts = binding_conflicts(cfg.channels.extra, InputBinding.of_store_attrs(attrs).bands_by_name())
        if conflicts:
            raise fail(f"the store was written with other EXTRA bands than channels.extra: {'; '.join(conflicts)}")
        if cfg.data.mask_type not in attrs.get("mask_types", []):
            raise fail(
                f"the store has no {cfg.data.mask_type!r} labels (data.mask_type; it has {attrs.get('mask_types')})"
            )
        store = ZarrTileStore(path, mask_type=cfg.data.mask_type, extra_channels=extra)
        ids = [str(t) for t in store.metadata.tile_id]
        clash = next((t for t in ids if t in seen), None)
        if clash is not None:
            raise fail(f"the store shares tile ids with {seen[clash]} (e.g. {clash!r}); is the same data joined twice?")
        seen.update(dict.fromkeys(ids, f"data.additional_roots[{i}]"))
        sources.append(store)
    return sources


def build_train_dataset(
    cfg: PipelineConfig,
    run_dir: str | Path,
    stats: NormalizationStats,
    *,
    seed: int = 0,
    train_store: str | Path | None = None,
) -> TileDataset:
    """The training dataset: ``datasets/train.zarr`` joined with every ``data.additional_roots`` store.

    Without additional roots this is ``build_dataset(cfg, <run>/datasets/train.zarr, stats, train=True)``.
    Normalization ``stats`` are the train store's; the additional stores are checked by
    :func:`open_additional_roots` before anything trains. ``train_store`` replaces the run's train store (data
    validation of a store outside a run directory); additional roots still resolve against ``run_dir``.
    """
    store = Path(run_dir) / RunLayout.DATASET.at(split="train") if train_store is None else Path(train_store)
    train = open_source(store, cfg.data.mask_type, [c.name for c in cfg.channels.extra])
    if not cfg.data.additional_roots:
        return build_dataset(cfg, train, stats, train=True, seed=seed)
    meta = getattr(train, "metadata", None)
    ids = [] if meta is None else [str(t) for t in meta.tile_id]
    extra = open_additional_roots(cfg, run_dir, ids)
    return build_dataset(cfg, ConcatSource([train, *extra]), stats, train=True, seed=seed)


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
