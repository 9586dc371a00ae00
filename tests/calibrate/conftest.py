from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config.pipeline import PipelineConfig
from tests.helpers import copy_run, fake_trained_seed, make_data_run
from tests.train.conftest import tiny_train_config

SEEDS = (1, 2)


def calib_config(**calibration: object) -> PipelineConfig:
    cfg = tiny_train_config()
    cal = cfg.calibration.model_copy(update={"large_rts_bbox_m": 60.0, **calibration})
    return cfg.model_copy(update={"calibration": cal})


@pytest.fixture(scope="session")
def model_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run with the data stages done, untrained (seeded) EMA weights for SEEDS (no training needed) and each
    seed's logit cache of calib_config(): built once per worker and only read by the tests (one that writes takes a
    copy_run), so the cache tests, the streaming tests and the calibrated run share one pass per seed."""
    from rtscore import stages

    cfg = calib_config()
    run = make_data_run(tmp_path_factory.mktemp("calib") / "run", cfg)
    for seed in SEEDS:
        fake_trained_seed(run, cfg, seed)
    for seed in SEEDS:
        stages.logit_cache(str(run), cfg, seed)
    return run


@pytest.fixture
def run_copy(model_run: Path, tmp_path: Path) -> Path:
    return copy_run(model_run, tmp_path / "run")
