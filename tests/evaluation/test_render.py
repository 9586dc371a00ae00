"""The test report as text: the console's table and test_report.md, both from the one results table."""

from __future__ import annotations

from rtscore.config.deployment import DeploymentConfig
from rtscore.evaluation import SeedTestResult, TestReport, render_test, render_test_markdown


def one_seed() -> SeedTestResult:
    """Seed 42 at 1:200, every metric 0.5, on one positive and one negative tile."""
    names = ("iou_rts", "f1_rts", "pr_auc", "no_skill_pr_auc")
    return SeedTestResult(
        seed=42,
        threshold=0.5,
        temperature=1.0,
        threshold_source="target_precision",
        metrics={"1_200": dict.fromkeys(names, 0.5)},
        recall_by_size=[],
        n_pos_tiles=1,
        n_neg_tiles=1,
    )


def test_the_test_report_renders_its_table_and_its_file() -> None:
    seed = one_seed()
    report = TestReport.from_seeds([seed], DeploymentConfig(threshold=0.5, temperature=1.0), [])
    table = render_test(report)
    assert table.splitlines()[0] == "Test-Realistic" + " " * 3 + f"{'1:200':>17}"
    assert table.splitlines()[1] == f"{'PR-AUC':<17}{'0.500 (1 seed)':>17}"
    md = render_test_markdown(report)
    assert md.startswith("# Test-Realistic report (1 seed: 42)\n") and "| PR-AUC | 0.500 (1 seed) |" in md


def test_the_results_table_is_one_row_per_metric_and_one_column_per_ratio_of_the_reports_own_text() -> None:
    from rtscore.evaluation import results_table
    from tests.helpers import small_test_report

    report = small_test_report([42, 43])
    assert results_table(report.aggregate) == (["1:200"], [["pr_auc", "0.810 ± 0.014"], ["x", "n/a"]])
    assert results_table(report.aggregate, [("x", "X"), ("pr_auc", "PR-AUC")])[1] == [
        ["X", "n/a"],
        ["PR-AUC", "0.810 ± 0.014"],
    ]
    assert results_table({}) == ([], [])


def test_a_multiscale_table_says_it_is_beside_the_canonical_1x_result_not_instead_of_it() -> None:
    """Guide §4.6: evaluate_test's number is the 1x one; a shipped multi-scale deployment's table (a declared
    deviation: the guide evaluates it later, in the inference pipeline) says so in the report itself."""
    seed = one_seed()
    one = TestReport.from_seeds([seed], DeploymentConfig(threshold=0.5, temperature=1.0), [])
    shipped = DeploymentConfig(threshold=0.5, temperature=1.0, scales=[1.0, 0.5], fusion="max")
    report = one.model_copy(update={"multiscale": TestReport.from_seeds([seed], shipped, [])})
    md = render_test_markdown(report)
    canonical, _, beside = md.partition("# Multi-scale deployment")
    assert "Canonical 1x result" in canonical and "beside this result, not instead of it" in canonical
    assert "not instead of it: the 1x table stays the Test-Realistic result" in beside
    assert "not in evaluate_test (§4.6)" in beside
    assert "beside the canonical 1x table above, not instead of it:" in render_test(report)
    assert "not instead of" not in render_test_markdown(one) + render_test(one)  # a 1x deployment: one table
