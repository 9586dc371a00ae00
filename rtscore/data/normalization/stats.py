"""The normalization-stats file (guide §4.5): per-channel mean and std (and clip bounds) of the train split,
bound to channel names and EXTRA bands; written once, checked against the config at every load.

Beside the pooled moments the file may record each training region's own (``regions``: valid pixels, tiles, mean and
std per channel, clipped as the pooled ones): the spread the drift gate shows a new scene against (``rts drift``).
The field is optional: a file written before it loads as before, without regions.

The pass that computes the stats is `rtscore.data.normalization.compute`; the transform that applies them is
`rtscore.data.normalization.input_transform`."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rtscore.config.binding import RGB_NAMES, ExtraChannel, binding_conflicts
from rtscore.errors import PipelineError
from rtscore.storage import atomic_write_json


class NormalizationStatsError(PipelineError, ValueError):
    """A stats file is missing, malformed, or bound to other channels than the config's."""


@dataclass(frozen=True, eq=False)
class RegionStats:
    """One training region's valid pixels: how many (and in how many tiles), and per channel (in the stats' channel
    order) their mean and std, clipped as the pooled moments are."""

    region: str
    n_tiles: int
    n_pixels: int
    mean: np.ndarray
    std: np.ndarray

    def to_json(self) -> dict[str, Any]:
        return {
            "region": self.region,
            "n_tiles": self.n_tiles,
            "n_pixels": self.n_pixels,
            "mean": [float(x) for x in self.mean],
            "std": [float(x) for x in self.std],
        }


@dataclass
class NormalizationStats:
    """The loaded `normalization_stats.json`: channel names bound to mean/std (raw units)."""

    channel_names: list[str]
    mean: np.ndarray
    std: np.ndarray
    n_tiles_used: int
    dataset_version: str
    computed_date: str
    clip_min: np.ndarray | None = None
    clip_max: np.ndarray | None = None
    source: str = field(default="<memory>", repr=False)
    extra_bands: list[int] | None = None  # 0-based EXTRA band of each extra channel (None: not recorded)
    regions: list[RegionStats] | None = None  # each training region's moments (None: not recorded)

    def to_json(self) -> dict[str, Any]:
        """The guide §4.5 schema; clip bounds appear only when clipping was configured, ``extra.bands`` (the
        EXTRA band each extra channel was read from) and ``regions`` (each training region's moments, channels in
        the order of ``rgb`` then ``extra``) when known."""

        def block(sl: slice) -> dict[str, Any]:
            out: dict[str, Any] = {
                "channel_names": self.channel_names[sl],
                "mean": [float(x) for x in self.mean[sl]],
                "std": [float(x) for x in self.std[sl]],
            }
            if self.clip_min is not None and self.clip_max is not None:
                out["clip_min"] = [float(x) for x in self.clip_min[sl]]
                out["clip_max"] = [float(x) for x in self.clip_max[sl]]
            if sl.start == 3 and self.extra_bands is not None:
                out["bands"] = list(self.extra_bands)
            return out

        doc: dict[str, Any] = {
            "dataset_version": self.dataset_version,
            "computed_date": self.computed_date,
            "n_tiles_used": self.n_tiles_used,
            "rgb": block(slice(0, 3)),
        }
        if len(self.channel_names) > 3:
            doc["extra"] = block(slice(3, None))
        if self.regions is not None:
            doc["regions"] = [r.to_json() for r in self.regions]
        return doc


def write_normalization_stats(stats: NormalizationStats, path: str | Path) -> Path:
    p = Path(path)
    atomic_write_json(p, stats.to_json())
    return p


def _block(doc: dict[str, Any], key: str, source: str) -> tuple[list[str], list[float], list[float]]:
    blk = doc.get(key)
    if not isinstance(blk, dict):
        raise NormalizationStatsError(f"{source}: missing '{key}' block")
    try:
        names, mean, std = list(blk["channel_names"]), list(blk["mean"]), list(blk["std"])
    except KeyError as err:
        raise NormalizationStatsError(f"{source}: '{key}' block lacks {err}") from None
    if not len(names) == len(mean) == len(std):
        raise NormalizationStatsError(
            f"{source}: '{key}' has {len(names)} channel_names, {len(mean)} mean and {len(std)} std values"
        )
    return names, mean, std


def load_normalization_stats(
    path: str | Path, extra_channels: Sequence[str] | Sequence[ExtraChannel] = ()
) -> NormalizationStats:
    """Load stats and assert the channel-name binding against the config (guide §4.5).

    ``extra_channels`` are the configured extra channels: names, or ``{name, band}`` entries whose bands must
    equal the bands the stats record (stats written before bands were recorded are checked by name only).
    """
    p = Path(path)
    source = str(p)
    if not p.is_file():
        raise NormalizationStatsError(f"normalization stats file not found: {p}")
    try:
        doc = json.loads(p.read_text())
    except ValueError as err:
        raise NormalizationStatsError(f"{source} is not valid JSON: {err}") from None
    names, mean, std = _block(doc, "rgb", source)
    if names != list(RGB_NAMES):
        raise NormalizationStatsError(f"{source}: rgb.channel_names must be {list(RGB_NAMES)}; got {names}")
    want = [c.name if isinstance(c, ExtraChannel) else c for c in extra_channels]
    has_extra = "extra" in doc
    if want or has_extra:
        e_names, e_mean, e_std = _block(doc, "extra", source) if has_extra else ([], [], [])
        if e_names != want:
            raise NormalizationStatsError(
                f"{source}: extra.channel_names {e_names} do not match the config's channels.extra {want} "
                "(stats of one band must never be applied to another; recompute the stats)"
            )
        names, mean, std = names + e_names, mean + e_mean, std + e_std
    bands = _recorded_bands(doc, source, len(want))
    declared = [c for c in extra_channels if isinstance(c, ExtraChannel)]
    conflicts = binding_conflicts(declared, dict(zip(want, bands, strict=True))) if bands is not None else []
    if conflicts:
        raise NormalizationStatsError(
            f"{source}: the stats were computed from other EXTRA bands than the configured binding: "
            f"{'; '.join(conflicts)} (stats of one band must never be applied to another; recompute the stats)"
        )
    std_arr = np.asarray(std, np.float64)
    if not np.isfinite(std_arr).all() or (std_arr <= 0).any() or not np.isfinite(mean).all():
        raise NormalizationStatsError(f"{source}: mean/std must be finite and std > 0; got std {std}")
    clip_min = clip_max = None
    if "clip_min" in doc["rgb"]:
        clip_min = np.array(doc["rgb"]["clip_min"] + (doc.get("extra", {}).get("clip_min", []) if want else []))
        clip_max = np.array(doc["rgb"]["clip_max"] + (doc.get("extra", {}).get("clip_max", []) if want else []))
    return NormalizationStats(
        channel_names=names,
        mean=np.asarray(mean, np.float64),
        std=std_arr,
        n_tiles_used=int(doc.get("n_tiles_used", 0)),
        dataset_version=str(doc.get("dataset_version", "")),
        computed_date=str(doc.get("computed_date", "")),
        clip_min=clip_min,
        clip_max=clip_max,
        source=source,
        extra_bands=bands,
        regions=_recorded_regions(doc, source, names),
    )


def _recorded_bands(doc: dict[str, Any], source: str, n_extra: int) -> list[int] | None:
    """``extra.bands`` of a stats file (None when it records none)."""
    if not n_extra:
        return []
    bands = doc.get("extra", {}).get("bands")
    if bands is None:
        return None
    if not isinstance(bands, list) or len(bands) != n_extra or not all(isinstance(b, int) and b >= 0 for b in bands):
        raise NormalizationStatsError(f"{source}: extra.bands must hold {n_extra} band indices >= 0; got {bands}")
    return [int(b) for b in bands]


def _recorded_regions(doc: dict[str, Any], source: str, names: list[str]) -> list[RegionStats] | None:
    """``regions`` of a stats file (None when it records none), each checked against the channels it loads:
    every problem named at once."""
    entries = doc.get("regions")
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise NormalizationStatsError(f"{source}: regions must be a list of per-region entries; got {entries!r}")
    n = len(names)
    out: list[RegionStats] = []
    problems: list[str] = []
    for i, e in enumerate(entries):
        where = f"regions[{i}]"
        try:
            mean = np.asarray(e["mean"], np.float64)
            std = np.asarray(e["std"], np.float64)
            r = RegionStats(str(e["region"]), int(e["n_tiles"]), int(e["n_pixels"]), mean, std)
        except (TypeError, KeyError, ValueError) as err:
            problems.append(f"{where}: needs region, n_tiles, n_pixels, mean and std ({type(err).__name__}: {err})")
            continue
        if mean.shape != (n,) or std.shape != (n,):
            problems.append(f"{where} ({r.region}): {mean.size} means and {std.size} stds for {n} channels {names}")
        elif not (np.isfinite(mean).all() and np.isfinite(std).all() and (std >= 0).all() and r.n_pixels > 0):
            problems.append(f"{where} ({r.region}): mean/std must be finite, std >= 0 and n_pixels > 0")
        else:
            out.append(r)
    if problems:
        raise NormalizationStatsError(f"{source}: {'; '.join(problems)} (recompute the stats: rts stats)")
    return out
