"""The full pipeline flow: data stages, multi-seed training, calibration, test evaluation, deployment package."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.calibrate import calibrate, evaluate_test, package
from flows.data import data_pipeline
from flows.train import multi_seed_train


@flow(name="rts-pipeline")
def pipeline(
    config: str,
    run_dir: str,
    seeds: list[int] | None = None,
    refresh: bool = False,
    skip_generation: bool = False,
) -> dict[str, Any]:
    """generate -> stats -> validation -> multi-seed training -> calibrate -> evaluate-test -> package.

    Every stage is cached on (code, the config sections it uses, its inputs' fingerprints): a retry re-runs
    only what failed and what depends on it.
    """
    out: dict[str, Any] = dict(data_pipeline(config, run_dir, refresh=refresh, skip_generation=skip_generation))
    training = multi_seed_train(config, run_dir, seeds=seeds, fresh=refresh)
    trained = [r.result.seed for r in training]
    out["training"] = training
    out["calibration"] = calibrate(config, run_dir, seeds=trained, refresh=refresh)
    out["test"] = evaluate_test(config, run_dir, seeds=trained, refresh=refresh)
    out["package"] = package(config, run_dir, seeds=trained, refresh=refresh)
    return out
