"""Caching correct by construction, against a real run directory and the real pipeline flow.

An edit to a module in a stage's import closure re-runs that stage and every stage after it, and nothing
before it; an edit outside every closure re-runs nothing. The shipped seed is decided once, by calibration.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtscore.config import load_pipeline_config
from rtscore.stages import STAGES, cache_key, code_fingerprint
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import CodeEdits, executed_stages, fake_trained_seed, make_data_run, quick_training

ROOT = Path(__file__).resolve().parents[2]
NAMES = [s.name for s in STAGES]
AFTER_TRAINING = ["train-seed", "logit-cache", "calibrate", "evaluate-test", "package"]


@pytest.fixture
def edits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CodeEdits]:
    yield CodeEdits(monkeypatch)
    code_fingerprint.cache_clear()


@pytest.mark.slow
def test_a_code_edit_recomputes_its_stage_and_everything_after_it_and_nothing_before(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, edits: CodeEdits
) -> None:
    from flows.params import PipelineParams
    from flows.pipeline import pipeline

    config = write_config(tmp_path / "pipeline.yaml", quick_training(tiny_training_config([1])))
    params = PipelineParams(config=str(config), run_dir=str(tmp_path / "run"))
    pipeline(params)
    seen = executed_stages(monkeypatch)
    pipeline(params)
    assert [s for s in seen if s in NAMES] == [], "a completed pipeline re-runs nothing"

    # The keys of every stage run of this pipeline, computed from the real run directory after each edit.
    cfg = load_pipeline_config(config)
    runs = [("generate-dataset", {"split": s}) for s in ("train", "val", "test")]
    runs += [("normalization-stats", {}), ("validate-data", {}), ("train-seed", {"seed": 1})]
    runs += [("logit-cache", {"seed": 1}), *((n, {"seeds": [1]}) for n in NAMES[-3:])]

    def keys() -> dict[tuple[str, str], str]:
        return {(n, str(p)): cache_key(n, params.run_dir, cfg, p) for n, p in runs}

    cases = {  # edited file -> the stages whose cache keys change, in pipeline order
        "rtscore/data/normalization/stats.py": ["normalization-stats", "validate-data", *AFTER_TRAINING],
        "rtscore/metrics/histograms.py": AFTER_TRAINING,
        "README.md": [],
        "tests/stages/test_caching.py": [],
        "rtscore/package/verify.py": ["package"],
        "rtscore/calibrate/temperature.py": AFTER_TRAINING[1:],
        "rtscore/losses/focal.py": AFTER_TRAINING,
    }
    clean = keys()
    for rel, expected in cases.items():
        edits.edit(rel)
        changed = {name for (name, p), k in keys().items() if clean[(name, p)] != k}
        assert sorted(changed, key=NAMES.index) == expected, rel
        edits.undo(rel)
        assert keys() == clean

    # ... and those keys are what the pipeline runs on: three of the edits, run for real (a logit-cache edit re-runs
    # from there, the training before it kept; that an edit of the train closure retrains from scratch is
    # tests/stages/test_resume_identity.py's, on the train-seed stage itself).
    for rel in ("README.md", "rtscore/package/verify.py", "rtscore/calibrate/temperature.py"):
        edits.edit(rel)
        seen.clear()
        pipeline(params)
        assert sorted({s for s in seen if s in NAMES}, key=NAMES.index) == cases[rel], rel
        seen.clear()
        pipeline(params)
        assert [s for s in seen if s in NAMES] == [], f"{rel}: the second run is served from the cache"


@pytest.mark.slow
def test_the_package_ships_the_seed_calibration_chose(prefect_harness: None, tmp_path: Path) -> None:
    from flows.cli.main import main
    from rtscore.config import parse_pipeline_config

    data = quick_training(tiny_training_config([42, 43, 44]))
    config = write_config(tmp_path / "pipeline.yaml", data)
    cfg = parse_pipeline_config(data)
    # Three recorded seeds, as `rts run` leaves them: which seed ships is decided from their records, whatever the
    # weights learnt, so seeded untrained weights do (the full `rts run` path is tests/flows/test_train_flow.py's).
    run = make_data_run(tmp_path / "run", cfg)
    for seed in (42, 43, 44):
        fake_trained_seed(run, cfg, seed)
    # Make seed 42 the best by validation metric: a package choosing over every trained seed would ship it.
    best_42 = run / "seeds/seed_42/run_summary.json"
    doc = json.loads(best_42.read_text())
    doc["best_val_realistic_pr_auc_geomean_smoothed"] = 0.999
    best_42.write_text(json.dumps(doc))

    assert main(["calibrate", "--config", str(config), "--run", str(run), "--seeds", "43", "44"]) == 0
    shipped = json.loads((run / "calibration/summary.json").read_text())["shipped_seed"]
    assert shipped in (43, 44)
    assert main(["package", "build", "--config", str(config), "--run", str(run), "--seeds", "43", "44"]) == 0
    meta = json.loads((run / "package/run_metadata.json").read_text())
    assert meta["seed"] == shipped
    weights = (run / f"seeds/seed_{shipped}/best_deployment.pth").read_bytes()
    assert (run / "package/weights.pth").read_bytes() == weights
    deployment = (run / f"calibration/seed_{shipped}/deployment_config.yaml").read_bytes()
    assert (run / "package/deployment_config.yaml").read_bytes() == deployment

    # Packaging other seeds than the last calibration covered is refused, naming what to run.
    assert main(["package", "build", "--config", str(config), "--run", str(run), "--seeds", "42", "43"]) == 2
