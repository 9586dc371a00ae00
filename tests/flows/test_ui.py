"""What the Prefect UI shows of the data stages (the markdown, without a Prefect server)."""

from __future__ import annotations

from pathlib import Path

from flows.ui import derived_split_md
from rtscore.data.splits import SplitResult
from rtscore.storage import RunLayout


def test_a_derived_split_and_its_warnings_are_shown_with_the_datasets(tmp_path: Path) -> None:
    assert derived_split_md(str(tmp_path)) == ""  # splits.yaml given: nothing to show
    result = SplitResult(
        splits={"train": ["a", "b"], "val": ["c", "d"], "test": ["e"]},
        tiles={"train": 80, "val": 10, "test": 10},
        positives={"train": 69, "val": 10, "test": 21},
        shares={"train": 0.8, "val": 0.1, "test": 0.1},
        warnings=["train holds 69 of 100 positive tiles (69% < 70%)"],
        derived_from="/data/tiles",
    )
    path = tmp_path / RunLayout.DERIVED_SPLITS_SUMMARY.at()
    path.parent.mkdir(parents=True)
    path.write_text(result.model_dump_json())
    md = derived_split_md(str(tmp_path))
    assert "Split derived from /data/tiles" in md and "| train | 2 | 80 | 80.0% | 69 |" in md
    assert "**warning**: train holds 69 of 100 positive tiles (69% < 70%)" in md
