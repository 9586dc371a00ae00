from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rtscore.config.base import dump_yaml
from rtscore.config.deployment import DeploymentConfig
from rtscore.evaluation import render_test_markdown
from rtscore.evaluation.evaluate import (
    EvaluationError,
    SeedEvaluation,
    SeedTestResult,
    TestReport,
    fmt,
    frozen_deployment,
    pixel_confusion_at_ratio,
)
from rtscore.metrics import LogitBins, ObjectCounter, TileHistograms
from tests.helpers import calibrated_deployment


@pytest.mark.parametrize(
    ("threshold", "temperature", "message"),
    [(None, 1.5, "threshold null"), (0.5, None, "temperature null"), (None, None, "threshold, temperature null")],
)
def test_test_evaluation_refuses_an_uncalibrated_deployment_config(
    tmp_path: Path, threshold: float | None, temperature: float | None, message: str
) -> None:
    path = tmp_path / "deployment_config.yaml"
    dump_yaml(calibrated_deployment(threshold=threshold, temperature=temperature), path)
    with pytest.raises(EvaluationError, match=message) as err:
        frozen_deployment(path)
    assert str(path) in str(err.value) and "run calibrate first" in str(err.value)
    with pytest.raises(EvaluationError, match="not found"):
        frozen_deployment(tmp_path / "missing.yaml")


def _seed(seed: int, metrics: dict[str, dict[str, float]]) -> SeedTestResult:
    return SeedTestResult(
        seed=seed, threshold=0.5, temperature=1.0, metrics=metrics, recall_by_size=[], n_pos_tiles=1, n_neg_tiles=1
    )


def test_mean_std_in_the_guides_format() -> None:
    assert fmt(0.7234, 0.0121) == "0.723 ± 0.012"
    dep = DeploymentConfig(threshold=0.5, temperature=1.0)
    two = TestReport.from_seeds(
        [_seed(42, {"1_200": {"iou_rts": 0.70}}), _seed(43, {"1_200": {"iou_rts": 0.74}})], dep, []
    )
    cell = two.aggregate["1_200"]["iou_rts"]
    assert cell.mean == pytest.approx(0.72) and cell.std == pytest.approx(0.028284, rel=1e-4)
    assert cell.text == "0.720 ± 0.028"


def test_one_seed_shows_its_std_as_undefined_not_zero() -> None:
    one = TestReport.from_seeds([_seed(1, {"1_200": {"x": 0.5}})], DeploymentConfig(threshold=0.5, temperature=1.0), [])
    cell = one.aggregate["1_200"]["x"]
    assert cell.text == "0.500 (1 seed)" and np.isnan(cell.std)
    again = TestReport.model_validate_json(one.model_dump_json())  # written and read through the same model
    assert again.aggregate["1_200"]["x"].text == "0.500 (1 seed)"


def test_exact_pixel_counts_are_reweighted_to_the_ratio() -> None:
    bins = LogitBins(core_bins=64)
    z = np.zeros((3, bins.n_bins), np.uint32)
    hist = TileHistograms(bins, z, z, ("a", "b", "c"), np.array([True, False, False]), np.zeros(3, np.int64))
    conf = np.array([[10, 2, 5, 100], [0, 4, 0, 200], [0, 0, 0, 300]], np.int64)  # tp, fp, fn, tn
    ev = SeedEvaluation(hist, conf, hist.is_positive, ObjectCounter())
    c = pixel_confusion_at_ratio(ev, 10)  # 1 positive tile, 2 negatives standing for 10: weight 5
    assert (c.tp, c.fp, c.fn, c.tn) == (10.0, 2 + 5 * 4.0, 5.0, 100 + 5 * 500.0)


def test_test_evaluation_refuses_numerics_edited_after_calibration(tmp_path: Path) -> None:
    """Issue 11: bf16 edited over an fp32 calibration must not produce a test report."""
    path = tmp_path / "deployment_config.yaml"
    dep = calibrated_deployment(precision="fp32")
    dump_yaml(dep.model_copy(update={"precision": "bf16"}), path)
    with pytest.raises(EvaluationError, match=r"precision: 'bf16' in the file, calibrated with 'fp32'") as err:
        frozen_deployment(path)
    assert str(path) in str(err.value)


def test_the_test_report_flags_a_fallback_threshold() -> None:
    ok = _seed(1, {"1_200": dict.fromkeys(("iou_rts", "f1_rts", "pr_auc", "no_skill_pr_auc"), 0.5)})
    fallback = ok.model_copy(update={"seed": 2, "threshold_source": "max_f1_fallback"})
    report = TestReport.from_seeds([ok, fallback], DeploymentConfig(threshold=0.5, temperature=1.0), [])
    assert report.fallback_seeds == [2]
    assert "WARNING: seeds [2] run at a max-F1 fallback threshold" in render_test_markdown(report)
    assert "| 2 | 0.5000 | max_f1_fallback |" in render_test_markdown(report)
    plain = TestReport.from_seeds([ok], DeploymentConfig(threshold=0.5, temperature=1.0), [])
    assert plain.fallback_warning() is None and "WARNING" not in render_test_markdown(plain)


def test_object_recall_by_area_is_labelled_as_mapping_labels_its_objects() -> None:
    """Issue 23 (5): the open last bin reads `50000+` in test_report.json and .md, as `size_bin` of `rts map`; a
    report written before (no label) reads back."""
    import json

    from rtscore.evaluation import SizeBin
    from rtscore.mapping.polygons import size_bin

    bins = [
        SizeBin(area_m2_from=lo, area_m2_to=hi, n_objects=1, recall=1.0, iou=0.3)
        for lo, hi in ((0.0, 2000.0), (50_000.0, 1e12))
    ]
    assert [b.label for b in bins] == ["0-2000", "50000+"]
    assert [b.label for b in bins] == [size_bin(a, [0.0, 2000.0, 50_000.0, 1e12]) for a in (10.0, 2e5)]
    names = ("iou_rts", "f1_rts", "pr_auc", "no_skill_pr_auc")
    seed = _seed(42, {"1_200": dict.fromkeys(names, 0.5)}).model_copy(update={"recall_by_size": bins})
    report = TestReport.from_seeds([seed], calibrated_deployment(), [])
    written = json.loads(report.model_dump_json())
    assert [b["label"] for b in written["per_seed"][0]["recall_by_size"]] == ["0-2000", "50000+"]
    for b in written["per_seed"][0]["recall_by_size"]:
        del b["label"]  # as written before
    assert TestReport.model_validate(written).per_seed[0].recall_by_size[1].label == "50000+"
    md = render_test_markdown(report)
    assert "| 0-2000 | 1 | 1.000 (1 seed) |" in md and "| 50000+ | 1 | 1.000 (1 seed) |" in md
