"""Stage evaluate-test: Test-Realistic per seed, mean ± std over seeds: the canonical 1x table, and the shipped
multi-scale configuration's beside it when the deployment is not 1x (guide §4.6)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from rtscore.calibrate.plots import plot_pr_curves
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.data.store.reader import ZarrTileStore
from rtscore.evaluation import (
    EvaluationError,
    GroupFigures,
    SeedEvaluation,
    SeedTestResult,
    TestReport,
    frozen_deployment,
    render_test,
    render_test_markdown,
    run_test_pass,
    summarize_seed,
)
from rtscore.evaluation.groups import TestTiles, group_tables, seed_groups
from rtscore.evaluation.object_table import ObjectTable
from rtscore.inference.context import needs_context
from rtscore.metrics import weighted_hist
from rtscore.stages.seeds import context_store, no_context_reason, seed_model_and_loader, trained_seeds
from rtscore.stages.spec import TRAINING_CONFIG, ArtifactRef, StageSpec, record, recorded, require_inputs
from rtscore.storage import RunDir, RunLayout, StorageError, atomic_write_json, atomic_write_text


class TestResult(BaseModel):
    """What evaluate-test hands on: the report and its recorded artifacts."""

    __test__ = False  # not a pytest class

    report: TestReport = Field(..., description="The test report (evaluation/test_report.json).")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded evaluation artifacts.")

    @property
    def table(self) -> str:
        """The console's table (:func:`rtscore.evaluation.render_test`)."""
        return render_test(self.report)


def _seed_result(s: int, dep: DeploymentConfig, ev: SeedEvaluation, groups: list[GroupFigures]) -> SeedTestResult:
    # frozen_deployment refuses nulls
    assert dep.threshold is not None and dep.temperature is not None and dep.threshold_source is not None
    return SeedTestResult(
        seed=s,
        threshold=dep.threshold,
        temperature=dep.temperature,
        threshold_source=dep.threshold_source,
        metrics=ev.metrics,
        recall_by_size=ev.recall_by_size,
        n_pos_tiles=int(ev.is_positive.sum()),
        n_neg_tiles=int((~ev.is_positive).sum()),
        groups=groups,
    )


def canonical_deployment(run: RunDir, seed: int, dep: DeploymentConfig) -> DeploymentConfig:
    """The seed's 1x operating point: its deployment config when that is 1x, else the 1x config calibration
    wrote beside it (same TTA, its own temperature and threshold)."""
    if not needs_context(dep.scales):
        return dep
    rel = RunLayout.SEED_DEPLOYMENT_CONFIG_1X.at(seed=seed)
    run.fetch(rel)
    return frozen_deployment(run.path(rel))


def evaluate_test(run_dir: str, cfg: PipelineConfig, seeds: list[int] | None = None) -> TestResult:
    """Test-Realistic per seed, mean ± std across seeds; ``evaluation/``.

    The canonical table is always 1x (guide §4.6): each seed's 1x operating point (:func:`canonical_deployment`),
    with its figures per region and latitude band (``TestReport.by_region``, ``by_latitude``; guide §8.3) and the
    per-object table ``test_objects.csv``, from the same passes. When a seed's frozen deployment config has other
    scales, that configuration is evaluated too, its 0.5x input from the test context store, and reported beside
    it, not instead of it (``TestReport.multiscale``): a declared deviation, since the guide runs multi-scale
    evaluation in the inference pipeline, not here (§4.6)."""
    run = RunDir(run_dir)
    seeds = trained_seeds(run, seeds)
    require_inputs(SPEC, run, seeds=seeds)
    deps = {s: frozen_deployment(run.at(RunLayout.SEED_DEPLOYMENT_CONFIG, seed=s)) for s in seeds}
    canonical = {s: canonical_deployment(run, s, deps[s]) for s in seeds}
    multiscale = [s for s in seeds if needs_context(deps[s].scales)]
    if multiscale and context_store(run, "test") is None:
        raise EvaluationError(
            f"the deployment configs of seeds {multiscale} have scales {deps[multiscale[0]].scales}; their "
            f"multi-scale table needs the test tiles' 0.5x input, and there is {no_context_reason('test')}"
        )
    tiles = TestTiles.of(ZarrTileStore(run.at(RunLayout.DATASET, split="test"), cfg.data.mask_type).metadata)
    passes = _seed_passes(run, cfg, deps, canonical, multiscale, tiles)
    thresholds = cfg.metrics.object_iou_thresholds
    report = TestReport.from_seeds(passes.per_seed, canonical[seeds[0]], thresholds)
    by_region, by_latitude = group_tables(passes.per_seed, cfg, has_latitudes=tiles.latitude is not None)
    report = report.model_copy(update={"by_region": by_region, "by_latitude": by_latitude})
    if passes.per_seed_ms:
        ms = TestReport.from_seeds(passes.per_seed_ms, deps[multiscale[0]], thresholds)
        report = report.model_copy(update={"multiscale": ms})
    return _write_evaluation(run, cfg, report, passes)


@dataclass
class _SeedPasses:
    """What the seeds' test passes leave for the files: their results, PR curves and the per-object table."""

    per_seed: list[SeedTestResult] = field(default_factory=list)
    per_seed_ms: list[SeedTestResult] = field(default_factory=list)
    curves: dict[int, dict[str, Any]] = field(default_factory=dict)
    objects: ObjectTable | None = None


def _seed_passes(
    run: RunDir,
    cfg: PipelineConfig,
    deps: dict[int, DeploymentConfig],
    canonical: dict[int, DeploymentConfig],
    multiscale: list[int],
    tiles: TestTiles,
) -> _SeedPasses:
    """Each seed's canonical pass (its results, groups, curves and found objects) and, for a multi-scale
    deployment, its shipped configuration's pass; one seed's passes in memory at a time."""
    out = _SeedPasses()
    for s in deps:
        model, loader, _ = seed_model_and_loader(run, cfg, s, "test", context=s in multiscale)
        ev = summarize_seed(run_test_pass(model, loader, cfg, canonical[s], tiles=tiles), cfg)
        out.per_seed.append(_seed_result(s, canonical[s], ev, seed_groups(ev, tiles, cfg)))
        for r in cfg.metrics.ratios:
            out.curves.setdefault(r, {})[f"seed {s}"] = (*weighted_hist(ev.hist, r), ev.hist.bins)
        out.objects = out.objects or ObjectTable.of(ev, tiles)
        out.objects.add_seed(s, ev)
        if s in multiscale:
            ev_ms = summarize_seed(run_test_pass(model, loader, cfg, deps[s]), cfg)
            out.per_seed_ms.append(_seed_result(s, deps[s], ev_ms, []))
    return out


def _write_evaluation(run: RunDir, cfg: PipelineConfig, report: TestReport, passes: _SeedPasses) -> TestResult:
    """``evaluation/``: the report (JSON and markdown), the per-object table and the PR curves, recorded."""
    assert passes.objects is not None  # a pass per seed, and at least one seed
    rels = [RunLayout.TEST_REPORT.at(), RunLayout.TEST_REPORT_MD.at(), RunLayout.TEST_OBJECTS.at()]
    rels += [RunLayout.TEST_PR_CURVES.at(ratio=r) for r in passes.curves]
    for rel in rels:
        run.forget(rel)
    atomic_write_json(run.at(RunLayout.TEST_REPORT), report.model_dump(mode="python"))
    atomic_write_text(run.at(RunLayout.TEST_REPORT_MD), render_test_markdown(report))
    atomic_write_text(run.at(RunLayout.TEST_OBJECTS), passes.objects.csv_text())
    for r, c in passes.curves.items():
        tag = f"1_{r}"
        points = [
            (f"seed {p.seed} @ threshold", p.metrics[tag]["recall"], p.metrics[tag]["precision"])
            for p in passes.per_seed
        ]
        plot_pr_curves(c, points, run.at(RunLayout.TEST_PR_CURVES, ratio=r), f"Test-Realistic 1:{r} (1x)")
    refs = [record(SPEC, run, rel, cfg) for rel in rels]
    return TestResult(report=report, artifacts=refs)


def recorded_test_result(run: RunDir, seeds: list[int]) -> TestResult:
    """The test evaluation of ``seeds``, from ``evaluation/test_report.json`` as its evaluate-test run recorded it
    (e.g. on another worker).

    Raises:
        StorageError: the report is not recorded, does not match its record, cannot be read, or is of other seeds.
    """
    rel = RunLayout.TEST_REPORT.at()
    try:
        run.verify(rel)
    except StorageError as err:
        raise StorageError(f"its artifacts are not in the run: {err}") from None
    path = run.path(rel)
    try:
        report = TestReport.model_validate(json.loads(path.read_text()))
    except (OSError, ValueError, ValidationError) as err:
        raise StorageError(f"{path} cannot be read as a test report: {err}") from None
    if sorted(report.seeds) != sorted(seeds):
        raise StorageError(f"{path} reports seeds {report.seeds}, not {seeds}")
    return TestResult(report=report, artifacts=recorded(SPEC, run, {}))


SPEC = StageSpec(
    name="evaluate-test",
    fn=evaluate_test,
    inputs=(
        RunLayout.DATASET.bind(split="test"),
        RunLayout.NORMALIZATION_STATS,
        RunLayout.BEST_WEIGHTS,
        RunLayout.SEED_DEPLOYMENT_CONFIG,
    ),
    optional_inputs=(RunLayout.CONTEXT_DATASET.bind(split="test"), RunLayout.SEED_DEPLOYMENT_CONFIG_1X),
    outputs=(RunLayout.TEST_REPORT, RunLayout.TEST_REPORT_MD, RunLayout.TEST_OBJECTS, RunLayout.TEST_PR_CURVES),
    config=(*TRAINING_CONFIG, "deployment", "calibration", "evaluation"),
    params=("seeds",),
    description="Test-Realistic with each seed's frozen deployment config; mean ± std over seeds.",
)
