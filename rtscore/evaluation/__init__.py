"""Test-Realistic evaluation with each seed's frozen deployment config, reported as mean ± std over seeds, and the
report as text (:mod:`rtscore.evaluation.render`: the one results table, the console's and ``test_report.md``)."""

from rtscore.evaluation.evaluate import (
    EvaluationError,
    MetricSummary,
    SeedEvaluation,
    SeedTestResult,
    SizeBin,
    TestReport,
    fmt,
    frozen_deployment,
    mean_std,
    run_test_pass,
    summarize_seed,
)
from rtscore.evaluation.render import ratio_label, render_test, render_test_markdown, results_table

__all__ = [
    "EvaluationError",
    "MetricSummary",
    "SeedEvaluation",
    "SeedTestResult",
    "SizeBin",
    "TestReport",
    "fmt",
    "frozen_deployment",
    "mean_std",
    "ratio_label",
    "render_test",
    "render_test_markdown",
    "results_table",
    "run_test_pass",
    "summarize_seed",
]
