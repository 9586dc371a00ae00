"""Issue 11.17: the README's single-seed path, `rts train --seed N` -> calibrate -> evaluate-test ->
package build, reaches a verified package without --seeds (the config lists more seeds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config import parse_pipeline_config
from tests.flows.configs import tiny_training_config, write_config
from tests.helpers import fake_trained_seed, make_data_run


@pytest.mark.slow
def test_single_seed_run_reaches_a_package_without_seeds(prefect_harness: None, tmp_path: Path) -> None:
    from flows.calibrate import calibrate, evaluate_test, package
    from flows.params import SeedStageParams
    from rtscore.package import verify_package

    data = tiny_training_config([42, 43, 44])
    config = write_config(tmp_path / "pipeline.yaml", data)
    cfg = parse_pipeline_config(data)
    run = make_data_run(tmp_path / "run", cfg)
    fake_trained_seed(run, cfg, 42)  # what `rts train --seed 42` leaves: seed 42 only
    params = SeedStageParams(config=str(config), run_dir=str(run))

    cal = calibrate(params)
    assert cal.shipped_seed == 42 and [p.seed for p in cal.summary.seeds] == [42]
    assert evaluate_test(params).report.seeds == [42]
    ref = package(params)
    assert Path(ref.uri) == run / "package"
    verdict = verify_package(run / "package")
    assert verdict.ok, verdict.failures()
