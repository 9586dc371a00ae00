"""After-training flows: calibrate (logit caches, gates, temperature, threshold), evaluate-test, package."""

from __future__ import annotations

from prefect import flow
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from flows.common import load_config, publish_summary, run_stage
from rtscore.stages import ArtifactRef, CalibrationResult, TestReport
from rtscore.storage import RunDir
from tasks import calibrate as t


@flow(name="calibrate")
def calibrate(config: str, run_dir: str, seeds: list[int] | None = None, refresh: bool = False) -> CalibrationResult:
    """Cache Val-Realistic logit statistics per seed, gate TTA and scales, fit temperature and threshold."""
    cfg = load_config(config)
    seeds = seeds or cfg.training.seeds
    caches = [run_stage(t.logit_cache, run_dir, cfg, s, refresh=refresh) for s in seeds]
    result: CalibrationResult = run_stage(t.calibrate, run_dir, cfg, seeds, refresh=refresh)
    create_table_artifact(
        key="calibration",
        table=[p.model_dump() for p in result.seeds],
        description=f"Per-seed temperature and threshold; shipped seed {result.shipped_seed}",
    )
    publish_summary(
        "calibrate",
        "Calibration",
        caches + result.artifacts,
        lambda: (RunDir(run_dir).path("calibration/report.md")).read_text(),
    )
    return result


@flow(name="evaluate-test")
def evaluate_test(config: str, run_dir: str, seeds: list[int] | None = None, refresh: bool = False) -> TestReport:
    """Test-Realistic with each seed's frozen deployment config; mean ± std across seeds."""
    cfg = load_config(config)
    seeds = seeds or cfg.training.seeds
    report: TestReport = run_stage(t.evaluate_test, run_dir, cfg, seeds, refresh=refresh)
    md = RunDir(run_dir).path("evaluation/test_report.md").read_text()
    create_markdown_artifact(key="test-report", markdown=md, description="Test-Realistic, mean ± std over seeds")
    return report


@flow(name="package")
def package(config: str, run_dir: str, seeds: list[int] | None = None, refresh: bool = False) -> ArtifactRef:
    """Assemble the deployment package of the shipped seed under `<run_dir>/package/`."""
    cfg = load_config(config)
    seeds = seeds or cfg.training.seeds
    ref: ArtifactRef = run_stage(t.package, run_dir, cfg, seeds, refresh=refresh)
    publish_summary("package", "Deployment package", [ref])
    return ref
