"""After-training flows: calibrate (logit caches, gates, temperature, threshold), evaluate-test, package."""

from __future__ import annotations

from prefect import flow

from flows.common import flow_run_scope, load_config, run_stage
from flows.params import SeedStageParams
from flows.ui import publish_summary, publish_table, report_tables, run_text
from rtscore.stages import ArtifactRef, CalibrationResult, TestReport
from tasks import calibrate as t


@flow(name="calibrate")
def calibrate(params: SeedStageParams) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        caches = [run_stage(t.logit_cache, params.run_dir, cfg, s, refresh=params.refresh) for s in seeds]
        result: CalibrationResult = run_stage(t.calibrate, params.run_dir, cfg, seeds, refresh=params.refresh)
        publish_table(
            "calibration",
            [p.model_dump() for p in result.seeds],
            f"Per-seed temperature and threshold; shipped seed {result.shipped_seed}",
        )
        publish_summary(
            "calibrate",
            "Calibration",
            caches + result.artifacts,
            lambda: _figures(result) + "\n" + run_text(params.run_dir, "calibration/report.md"),
        )
        return result


@flow(name="evaluate-test")
def evaluate_test(params: SeedStageParams) -> TestReport:
    """Test-Realistic with each seed's frozen deployment config; mean ± std across seeds."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        report: TestReport = run_stage(t.evaluate_test, params.run_dir, cfg, seeds, refresh=params.refresh)
        aggregate, per_seed = report_tables(run_text(params.run_dir, "evaluation/test_report.json"))
        if aggregate:
            publish_table("test-report-aggregate", aggregate, "Test-Realistic: mean ± std per ratio and metric")
            publish_table("test-report-per-seed", per_seed, "Test-Realistic: per seed and ratio")
        md = run_text(params.run_dir, "evaluation/test_report.md")
        publish_summary("test-report", "Test-Realistic, mean ± std over seeds", report.artifacts, lambda: md)
        return report


@flow(name="package")
def package(params: SeedStageParams) -> ArtifactRef:
    """Assemble the deployment package of the shipped seed under `<run_dir>/package/`."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        ref: ArtifactRef = run_stage(t.package, params.run_dir, cfg, seeds, refresh=params.refresh)
        publish_summary("package", "Deployment package", [ref], lambda: _package_md(params.run_dir))
        return ref


def _figures(result: CalibrationResult) -> str:
    d = result.deployment
    lines = [
        f"- shipped seed **{result.shipped_seed}**: threshold {d.threshold}, temperature {d.temperature}, "
        f"TTA {d.tta}, scales {d.scales}",
        f"- TTA gate: {result.tta_reason}",
        f"- scale gate: {result.scales_reason}",
    ]
    return "\n".join(lines) + "\n"


def _package_md(run_dir: str) -> str:
    return "## SHA256SUMS\n\n```\n" + run_text(run_dir, "package/SHA256SUMS", recorded="package") + "```\n"
