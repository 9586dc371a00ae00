"""Test-Realistic evaluation with each seed's frozen deployment config, reported as mean ± std over seeds."""

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
    "run_test_pass",
    "summarize_seed",
]
