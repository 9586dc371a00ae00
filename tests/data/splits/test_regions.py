from __future__ import annotations

import csv
from pathlib import Path

import pytest

from rtscore.data.splits.regions import SplitError, derive_splits, evaluate_split, region_counts
from rtscore.errors import PipelineError


def _rows(spec: dict[str, tuple[int, int]]) -> list[dict[str, str]]:
    """region -> (tiles, positives) as metadata.csv rows."""
    rows = []
    for region, (n, p) in spec.items():
        for i in range(n):
            rows.append(
                {"Tile_id": f"{region}-{i}", "RegionName": region, "TrainClass": "positive" if i < p else "negative"}
            )
    return rows


SPEC = {f"r{i:02d}": (100, 60) for i in range(20)}  # 2,000 tiles; 2 regions give test its 100 positives


def test_derived_split_blocks_whole_regions_and_meets_every_rule() -> None:
    result = derive_splits(_rows(SPEC), min_test_positives=100, seed=1)
    regions = [r for s in ("train", "val", "test") for r in result.splits[s]]
    assert sorted(regions) == sorted(SPEC) and len(set(regions)) == len(regions)
    assert result.positives["test"] >= 100 and len(result.splits["val"]) >= 2
    assert all(abs(result.shares[s] - t) <= 0.10 for s, t in (("train", 0.8), ("val", 0.1), ("test", 0.1)))
    assert derive_splits(_rows(SPEC), min_test_positives=100, seed=1).splits == result.splits  # deterministic
    assert "| test |" in result.summary()


def test_rules_fail_in_priority_order_with_clear_messages() -> None:
    counts = region_counts(_rows(SPEC))
    all_regions = sorted(SPEC)
    with pytest.raises(SplitError, match="in two splits"):
        evaluate_split({"train": all_regions, "val": ["r00", "r01"], "test": ["r02"]}, counts)
    with pytest.raises(SplitError, match="test holds 60 positive tiles; at least 100"):
        evaluate_split({"train": all_regions[3:], "val": all_regions[1:3], "test": all_regions[:1]}, counts)
    with pytest.raises(SplitError, match="val spans 1 region"):
        evaluate_split({"train": all_regions[5:], "val": all_regions[4:5], "test": all_regions[:4]}, counts)
    with pytest.raises(SplitError, match="tile shares off 80/10/10"):
        evaluate_split({"train": all_regions[10:], "val": all_regions[4:10], "test": all_regions[:4]}, counts)
    with pytest.raises(SplitError, match="no region-level split"):
        derive_splits(_rows({f"r{i}": (10, 1) for i in range(6)}), min_test_positives=100)


def test_too_few_positives_in_train_is_a_warning() -> None:
    spec = {**{f"p{i}": (10, 10) for i in range(4)}, **{f"n{i}": (100, 0) for i in range(16)}}
    counts = region_counts(_rows(spec))
    train = [f"n{i}" for i in range(14)] + ["p3"]
    result = evaluate_split(
        {"train": train, "val": ["n14", "n15"], "test": ["p0", "p1", "p2"]},
        counts,
        min_test_positives=20,
        tolerance=0.2,
    )
    assert result.warnings and "70%" in result.warnings[0]


def test_min_val_regions_is_enforced_where_splits_are_checked_and_derived() -> None:
    """splits.min_val_regions: a given split is refused naming the key; a derived split meets it."""
    counts = region_counts(_rows(SPEC))
    all_regions = sorted(SPEC)
    given = {"train": all_regions[5:], "val": all_regions[2:5], "test": all_regions[:2]}  # val: 3 regions
    assert len(evaluate_split(given, counts, min_val_regions=3).splits["val"]) == 3
    with pytest.raises(SplitError, match=r"val spans 3 region\(s\); at least 4 are needed \(splits.min_val_regions\)"):
        evaluate_split(given, counts, min_val_regions=4)
    derived = derive_splits(_rows(SPEC), min_test_positives=100, min_val_regions=4, seed=1)
    assert len(derived.splits["val"]) >= 4
    with pytest.raises(SplitError, match=r"needs at least 7 .*splits.min_val_regions"):
        derive_splits(_rows({f"r{i}": (10, 5) for i in range(6)}), min_test_positives=1, min_val_regions=5)


def test_a_derived_data_root_split_uses_the_pipeline_splits_rules(tmp_path: Path) -> None:
    """The pipeline's `splits` section (not a second knob in the generation config) sets the derived split's rules."""
    from rtscore.config.pipeline import SplitsConfig
    from rtscore.data.geotiff.root import METADATA_COLUMNS
    from rtscore.data.geotiff.root_splits import ensure_splits

    root = tmp_path / "root"
    root.mkdir()
    with open(root / "metadata.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(METADATA_COLUMNS))
        writer.writeheader()
        for row in _rows({f"r{i:02d}": (10, 5) for i in range(20)}):
            writer.writerow({**row, "centroid_lat": "70", "centroid_lon": "-150", "UIDs": ""})
    splits = ensure_splits(root, rules=SplitsConfig(min_test_positives=5, min_val_regions=3))
    assert len(splits["val"]) >= 3 and not (root / "splits.yaml").exists()  # derived, written nowhere
    with pytest.raises(PipelineError, match=r"splits\.min_test_positives"):
        ensure_splits(root, rules=SplitsConfig(min_test_positives=1000))


def test_a_thin_val_is_a_warning_of_the_split_under_min_val_positives() -> None:
    """Issue 23 point 3: a split whose val holds fewer positive tiles than splits.min_val_positives (default 20)
    passes with a warning in its ``warnings``; a derived split meets the floor where some order of regions can."""
    spec = {"p0": (100, 10), "p1": (100, 12), "one": (100, 1), **{f"n{i}": (100, 0) for i in range(17)}}
    counts = region_counts(_rows(spec))
    negatives = [f"n{i}" for i in range(17)]
    given = {"train": ["p1", *negatives[1:]], "val": ["one", "n0"], "test": ["p0"]}
    result = evaluate_split(given, counts, min_test_positives=10)
    assert result.positives["val"] == 1
    assert any("val holds 1 positive tile(s), fewer than splits.min_val_positives=20" in w for w in result.warnings)
    assert not any(
        "val holds" in w for w in evaluate_split(given, counts, min_test_positives=10, min_val_positives=1).warnings
    )
    derived = derive_splits(_rows(spec), min_test_positives=10, seed=0)  # 23 positives: val can never hold 20
    assert derived.positives["val"] < 20 and any("splits.min_val_positives=20" in w for w in derived.warnings)
    half = {**{f"p{i}": (100, 60) for i in range(10)}, **{f"n{i}": (100, 0) for i in range(10)}}
    met = derive_splits(_rows(half), min_test_positives=100, min_val_positives=50, seed=1)
    assert met.positives["val"] >= 50 and not met.warnings  # reachable: the derivation prefers a split meeting it
