"""The shipped seed is decided once, by calibration.

That an edit to a module in a stage's import closure re-runs that stage and every stage after it, and nothing before
it (an edit outside every closure nothing), is checked against the real pipeline flow's run directory by
tests/flows/test_train_flow.py, on the run it trains once for all of its caching checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import fake_trained_seed, make_data_run, quick_training


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
