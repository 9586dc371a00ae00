"""The region split of a data root without splits.yaml: derived from its metadata.csv, and written beside the
output (never into the data root, an input)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from rtscore.config.pipeline import SplitsConfig
from rtscore.data.geotiff.root import SPLITS_SUMMARY_JSON, SPLITS_YAML, GeotiffError, read_metadata, read_splits
from rtscore.data.splits.regions import SplitError, SplitResult, derive_splits
from rtscore.storage import atomic_write_text

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DerivedSplitFiles:
    """Where a split derived for a root without splits.yaml is written (never into the data root, an input):
    the split itself and its summary (:class:`~rtscore.data.splits.regions.SplitResult` as JSON)."""

    splits_yaml: Path
    summary_json: Path

    @classmethod
    def beside(cls, store: Path) -> DerivedSplitFiles:
        """Next to an output store (``rts generate`` outside a run): ``splits.yaml``, ``splits_summary.json``."""
        return cls(store.parent / SPLITS_YAML, store.parent / SPLITS_SUMMARY_JSON)


def derive_root_splits(root: Path, *, rules: SplitsConfig | None = None, seed: int = 0) -> SplitResult | None:
    """None when the root has splits.yaml; else a region-level split derived from metadata.csv with the rules of
    docs/geotiff.md (`rtscore.data.splits.regions`; thresholds from ``rules``, the pipeline config's `splits` section,
    defaults when None), each of its warnings logged (``logging.warning``: the console of ``rts``)."""
    if (root / SPLITS_YAML).is_file():
        return None
    rules = rules or SplitsConfig()
    try:
        result = derive_splits(
            read_metadata(root),
            min_test_positives=rules.min_test_positives,
            min_val_regions=rules.min_val_regions,
            min_val_positives=rules.min_val_positives,
            seed=seed,
        )
    except SplitError as err:
        raise GeotiffError(f"{root}: no {SPLITS_YAML}, and none can be derived: {err}") from None
    for warning in result.warnings:
        _log.warning(f"split derived for {root} (no {SPLITS_YAML}): {warning}")
    return result.model_copy(update={"derived_from": str(root)})


def ensure_splits(root: Path, *, rules: SplitsConfig | None = None, seed: int = 0) -> dict[str, list[str]]:
    """The root's splits: its splits.yaml, else the split :func:`derive_root_splits` derives (written nowhere)."""
    derived = derive_root_splits(root, rules=rules, seed=seed)
    return read_splits(root) if derived is None else derived.splits


def write_derived_split(result: SplitResult, to: DerivedSplitFiles) -> None:
    """A derived split as ``splits.yaml`` and its summary as JSON (each atomically), at ``to``: never the data
    root, which is an input."""
    import yaml

    atomic_write_text(to.summary_json, result.model_dump_json(indent=2))
    atomic_write_text(to.splits_yaml, yaml.safe_dump(result.splits, sort_keys=False))
