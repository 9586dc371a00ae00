"""Test-Realistic evaluation with each seed's frozen deployment config, reported as mean ± std over seeds, and the
report as text (:mod:`rtscore.evaluation.render`: the one results table, the console's and ``test_report.md``)."""

from rtscore.evaluation.evaluate import (
    EvaluationError,
    GroupFigures,
    GroupResult,
    GroupTable,
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
from rtscore.evaluation.render import (
    GROUP_HEADINGS,
    group_table,
    ratio_label,
    render_test,
    render_test_markdown,
    results_table,
)

__all__ = [
    "GROUP_HEADINGS",
    "EvaluationError",
    "GroupFigures",
    "GroupResult",
    "GroupTable",
    "MetricSummary",
    "SeedEvaluation",
    "SeedTestResult",
    "SizeBin",
    "TestReport",
    "fmt",
    "frozen_deployment",
    "group_table",
    "mean_std",
    "ratio_label",
    "render_test",
    "render_test_markdown",
    "results_table",
    "run_test_pass",
    "summarize_seed",
]
