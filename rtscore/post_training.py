"""After-training stages over a run directory (guide §10.4): logit cache, calibrate, evaluate-test, package.

Re-exported by `rtscore.stages`, which holds the data and training stages and what every stage shares.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from rtscore.config.base import dump_yaml, load_config
from rtscore.config.deployment import DeploymentConfig
from rtscore.config.pipeline import PipelineConfig
from rtscore.stage_base import BEST, ArtifactRef, _ref, stage_config_hash
from rtscore.storage import RunDir, StorageError


class SeedCalibration(BaseModel):
    """One seed's calibrated operating point."""

    seed: int = Field(..., description="Training seed.")
    temperature: float = Field(..., description="Fitted temperature T.")
    threshold: float = Field(..., description="Operating threshold on sigmoid(logit / T).")
    precision: float = Field(..., description="Val-Realistic precision at the threshold (calibration ratio).")
    recall: float = Field(..., description="Val-Realistic recall at the threshold (calibration ratio).")
    target_reached: bool = Field(..., description="Whether the target precision was reachable.")


class CalibrationResult(BaseModel):
    """What calibrate hands on: the frozen deployment config of the shipped seed and every seed's point."""

    deployment: DeploymentConfig = Field(..., description="calibration/deployment_config.yaml (shipped seed).")
    shipped_seed: int = Field(..., description="The seed whose threshold and temperature the file holds.")
    seeds: list[SeedCalibration] = Field(..., description="Per-seed calibration.")
    tta_reason: str = Field(..., description="Why the TTA gate chose what it chose.")
    scales_reason: str = Field(..., description="Why the scale gate chose what it chose.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded calibration artifacts.")


class TestReport(BaseModel):
    """The test evaluation: the aggregate table and where the report files are."""

    table: str = Field(..., description="Terminal table of mean ± std over seeds.")
    aggregate: dict[str, Any] = Field(..., description="Per ratio and metric: mean, std, text.")
    artifacts: list[ArtifactRef] = Field(default_factory=list, description="Recorded evaluation artifacts.")


def _seed_dir(seed: int) -> str:
    return f"seeds/seed_{seed}"


def _trained_seeds(run: RunDir, seeds: list[int] | None) -> list[int]:
    local = {int(p.name.removeprefix("seed_")) for p in run.path("seeds").glob("seed_*") if (p / BEST).is_file()}
    recorded: set[int] = set()
    if run.remote:  # another worker trained them: their weights are in the bucket, not (yet) in this mirror
        for rel in run.read_manifest().artifacts:
            m = re.fullmatch(rf"seeds/seed_(\d+)/{re.escape(BEST)}", rel)
            if m and int(m.group(1)) not in local and run.has(rel):
                recorded.add(int(m.group(1)))
    found = sorted(local | recorded)
    if seeds is None:
        if not found:
            raise StorageError(f"no trained seed under {run.path('seeds')}; run train first")
        return found
    missing = [s for s in seeds if s not in found]
    if missing:
        raise StorageError(f"seeds {missing} have no {BEST} under {run.path('seeds')}; trained seeds: {found}")
    return list(seeds)


def _pixel_size(store: Path) -> float:
    from rtscore.data.store import read_store_attrs

    return float(read_store_attrs(store).get("pixel_size_m", 4.77))


def _eval_setup(run: RunDir, cfg: PipelineConfig, seed: int, split: str) -> tuple[Any, Any, int]:
    """The seed's EMA model on the configured device and a sequential loader over `split`."""
    from rtscore.data.dataset import build_dataset
    from rtscore.data.normalization import load_normalization_stats
    from rtscore.train.data import val_loader
    from rtscore.train.loop import select_device
    from rtscore.train.noise_floor import load_eval_model

    device = select_device(cfg)
    model = load_eval_model(cfg, run.path(f"{_seed_dir(seed)}/{BEST}"), device)
    stats = load_normalization_stats(run.normalization_stats, [c.name for c in cfg.channels.extra])
    ds = build_dataset(cfg, run.dataset(split), stats, train=False)
    return model, val_loader(cfg, ds), len(ds)


def logit_cache(run_dir: str, cfg: PipelineConfig, seed: int, *, progress: bool = False) -> ArtifactRef:
    """`calibration/seed_<n>/logit_cache.zarr`: one pass over Val-Realistic per (scale, TTA transform)."""
    from rtscore.calibrate.cache import build_logit_cache
    from rtscore.storage import sha256_file

    run = RunDir(run_dir)
    run.require("datasets/val.zarr")
    run.require("normalization_stats.json")
    run.fetch(f"{_seed_dir(seed)}/{BEST}")
    weights = run.path(f"{_seed_dir(seed)}/{BEST}")
    if not weights.is_file():
        raise StorageError(f"{weights} not found; train seed {seed} first")
    model, loader, n = _eval_setup(run, cfg, seed, "val")
    rel = f"calibration/seed_{seed}/logit_cache.zarr"
    run.forget(rel)
    val = run.entry("datasets/val.zarr")
    build_logit_cache(
        model,
        loader,
        cfg,
        run.path(rel),
        n_tiles=n,
        pixel_size_m=_pixel_size(run.dataset("val")),
        attrs={"seed": seed, "weights_sha256": sha256_file(weights), "val_sha256": val.sha256 if val else None},
        progress=progress,
    )
    return _ref(run, rel, "logit-cache", stage_config_hash("logit-cache", cfg))


def _shipped_seed(run: RunDir, cfg: PipelineConfig, seeds: list[int]) -> int:
    """cfg.package.seed, else the best validation metric in seeds/summary.json (the rule the package uses)."""
    from rtscore.package import choose_seed, load_seed_results

    if cfg.package.seed is not None and cfg.package.seed not in seeds:
        raise StorageError(f"package.seed {cfg.package.seed} is not among the calibrated seeds {seeds}")
    run.fetch("seeds/summary.json")
    if not run.path("seeds/summary.json").is_file():  # a single train-seed run: nothing to compare
        return cfg.package.seed if cfg.package.seed is not None else seeds[0]
    results = [r for r in load_seed_results(run) if r.seed in seeds]
    return choose_seed(results, cfg.package.seed).seed if results else seeds[0]


def calibrate(run_dir: str, cfg: PipelineConfig, seeds: list[int] | None = None) -> CalibrationResult:
    """Gates on all seeds' caches, then per seed temperature and threshold; `calibration/` (guide §10.4 2-5)."""
    from rtscore.calibrate.cache import CacheError, LogitCache
    from rtscore.calibrate.run import calibrate_seed, run_gates
    from rtscore.storage import atomic_write_json, atomic_write_text, sha256_file

    run = RunDir(run_dir)
    seeds = _trained_seeds(run, seeds)
    caches = []
    for s in seeds:
        run.fetch(f"calibration/seed_{s}/logit_cache.zarr")
        run.fetch(f"{_seed_dir(s)}/{BEST}")
        cache = LogitCache(run.path(f"calibration/seed_{s}/logit_cache.zarr"))
        weights = run.path(f"{_seed_dir(s)}/{BEST}")
        if cache.attrs.get("weights_sha256") != sha256_file(weights):
            raise CacheError(f"the logit cache {cache.path} was computed from other weights than {weights}; rerun it")
        caches.append(cache)
    stage = "calibrate"
    chash = stage_config_hash(stage, cfg)
    rels = ["calibration/deployment_config.yaml", "calibration/gates.json", "calibration/report.md"]
    for rel in rels:
        run.forget(rel)
    gated, gates = run_gates(cfg, caches)
    atomic_write_json(run.path("calibration/gates.json"), gates)
    dump_yaml(gated, run.path("calibration/deployment_config.yaml"))
    reports: dict[int, dict[str, Any]] = {}
    for s, cache in zip(seeds, caches, strict=True):
        seed_rel = f"calibration/seed_{s}"
        dep_path = run.path(f"{seed_rel}/deployment_config.yaml")
        for name in ("deployment_config.yaml", "calibration_report.json", "reliability.png", "pr_curves.png"):
            run.forget(f"{seed_rel}/{name}")
        dump_yaml(gated, dep_path)  # the gated recipe; calibrate_seed writes threshold and temperature back
        reports[s] = calibrate_seed(dep_path, cache, cfg, run.path(seed_rel))
        atomic_write_json(run.path(f"{seed_rel}/calibration_report.json"), reports[s])
        rels += [f"{seed_rel}/{n}" for n in ("deployment_config.yaml", "calibration_report.json")]
        rels += [f"{seed_rel}/{n}" for n in ("reliability.png", "pr_curves.png")]
    shipped = _shipped_seed(run, cfg, seeds)
    op, temp = reports[shipped]["operating"], reports[shipped]["temperature"]["T"]
    final = load_config(DeploymentConfig, run.path(f"calibration/seed_{shipped}/deployment_config.yaml"))
    dump_yaml(final, run.path("calibration/deployment_config.yaml"))
    points = [
        SeedCalibration(
            seed=s,
            temperature=r["temperature"]["T"],
            threshold=r["operating"]["threshold"],
            precision=r["operating"]["precision"],
            recall=r["operating"]["recall"],
            target_reached=r["operating"]["target_reached"],
        )
        for s, r in reports.items()
    ]
    atomic_write_text(run.path("calibration/report.md"), _calibration_md(cfg, gates, reports, shipped))
    refs = [_ref(run, rel, stage, chash) for rel in rels]
    assert op["threshold"] == final.threshold and temp == final.temperature
    return CalibrationResult(
        deployment=final,
        shipped_seed=shipped,
        seeds=points,
        tta_reason=str(gates["tta"]["reason"]),
        scales_reason=str(gates["scales"]["reason"]),
        artifacts=refs,
    )


def _calibration_md(
    cfg: PipelineConfig, gates: dict[str, Any], reports: dict[int, dict[str, Any]], shipped: int
) -> str:
    cal = cfg.calibration
    lines = [
        "# Calibration (Val-Realistic)",
        "",
        f"Decisions at 1:{cal.ratio}, target precision {cal.target_precision}.",
        "",
        f"- **TTA**: `{gates['tta']['chosen']}`: {gates['tta']['reason']}",
        f"- **Scales**: `{gates['scales']['chosen']}`: {gates['scales']['reason']}",
        f"- **Shipped seed**: {shipped}",
        "",
    ]
    for gate in ("tta", "scales"):
        rows = gates[gate].get("rows") or []
        if rows:
            metric = "PR-AUC" if gate == "tta" else "large-RTS PR-AUC"
            side = "precision drop" if gate == "tta" else "FP-rate rise"
            lines += [f"| {gate} candidate | {metric} | gain | {side} | passes |", "|---|---|---|---|---|"]
            for r in rows:
                lines.append(
                    f"| {r['name']} | {r['metric_mean']:.4f} | {r['gain_mean']:+.2%} | {r['side_mean']:+.2%} | "
                    f"{'yes' if r['passes'] else 'no'} |"
                )
            lines.append("")
    lines += ["| seed | T | NLL before → after | ECE before → after | threshold | precision | recall |"]
    lines.append("|---|---|---|---|---|---|---|")
    for s, r in reports.items():
        t, op = r["temperature"], r["operating"]
        flag = "" if op["target_reached"] else " (target not reachable: max-F1)"
        lines.append(
            f"| {s} | {t['T']:.3f} | {t['nll_before']:.4f} → {t['nll_after']:.4f} | {t['ece_before']:.4f} → "
            f"{t['ece_after']:.4f} | {op['threshold']:.4f}{flag} | {op['precision']:.3f} | {op['recall']:.3f} |"
        )
    lines += ["", "Thresholds per ratio (calibrated probability, precision, recall):", ""]
    for s, r in reports.items():
        parts = [
            f"1:{t['ratio']} {t['threshold']:.4f} (P {t['precision']:.3f}, R {t['recall']:.3f})"
            for t in r["thresholds"]
        ]
        lines.append(f"- seed {s}: " + "; ".join(parts))
    return "\n".join(lines) + "\n"


def evaluate_test(run_dir: str, cfg: PipelineConfig, seeds: list[int] | None = None) -> TestReport:
    """Test-Realistic per seed with its frozen deployment config, mean ± std across seeds; `evaluation/`."""
    from rtscore.calibrate.plots import plot_pr_curves
    from rtscore.evaluate import (
        aggregate,
        frozen_deployment,
        render_markdown,
        render_table,
        run_test_pass,
        summarize_seed,
    )
    from rtscore.metrics import weighted_hist
    from rtscore.storage import atomic_write_json, atomic_write_text

    run = RunDir(run_dir)
    run.require("datasets/test.zarr")
    run.require("normalization_stats.json")
    seeds = _trained_seeds(run, seeds)
    for s in seeds:
        run.fetch(f"{_seed_dir(s)}/{BEST}")
        run.fetch(f"calibration/seed_{s}/deployment_config.yaml")
    deps = {s: frozen_deployment(run.path(f"calibration/seed_{s}/deployment_config.yaml")) for s in seeds}
    pixel = _pixel_size(run.dataset("test"))
    per_seed = []
    curves: dict[str, dict[str, Any]] = {}
    for s in seeds:
        model, loader, _ = _eval_setup(run, cfg, s, "test")
        ev = summarize_seed(run_test_pass(model, loader, cfg, deps[s]), cfg, pixel)
        dep = deps[s]
        per_seed.append(
            {
                "seed": s,
                "threshold": dep.threshold,
                "temperature": dep.temperature,
                "metrics": ev.metrics,
                "recall_by_size": ev.recall_by_size,
                "n_pos_tiles": int(ev.is_positive.sum()),
                "n_neg_tiles": int((~ev.is_positive).sum()),
            }
        )
        for r in cfg.metrics.ratios:
            curves.setdefault(f"1_{r}", {})[f"seed {s}"] = (*weighted_hist(ev.hist, r), ev.hist.bins)
    agg = aggregate({p["seed"]: p["metrics"] for p in per_seed})
    first = deps[seeds[0]]
    report = {
        "seeds": seeds,
        "tta": first.tta,
        "scales": first.scales,
        "object_iou_thresholds": list(cfg.metrics.object_iou_thresholds),
        "aggregate": agg,
        "per_seed": per_seed,
    }
    rels = ["evaluation/test_report.json", "evaluation/test_report.md"]
    for rel in rels:
        run.forget(rel)
    atomic_write_json(run.path(rels[0]), report)
    atomic_write_text(run.path(rels[1]), render_markdown(report))
    for tag, c in curves.items():
        rel = f"evaluation/pr_curves_{tag}.png"
        points = [
            (f"seed {p['seed']} @ threshold", p["metrics"][tag]["recall"], p["metrics"][tag]["precision"])
            for p in per_seed
        ]
        plot_pr_curves(c, points, run.path(rel), f"Test-Realistic {tag.replace('1_', '1:')}")
        rels.append(rel)
    chash = stage_config_hash("evaluate-test", cfg)
    refs = [_ref(run, rel, "evaluate-test", chash) for rel in rels]
    return TestReport(table=render_table(report), aggregate=agg, artifacts=refs)


def package(run_dir: str, cfg: PipelineConfig, seed: int | None = None) -> ArtifactRef:
    """`package/`: weights, stats, model/deployment config, run metadata, frozen requirements, SHA256SUMS."""
    from rtscore.package import build_package

    run = RunDir(run_dir)
    run.forget("package")
    build_package(run_dir, cfg, seed=seed)
    return _ref(run, "package", "package", stage_config_hash("package", cfg))
