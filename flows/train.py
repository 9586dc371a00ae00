"""Training flows: train-seed (one seed) and multi-seed-train (seeds [42, 43, 44] by default, in sequence)."""

from __future__ import annotations

from flows import ui
from flows.common import flow_run_scope, load_config
from flows.failures import flow
from flows.params import MultiSeedParams, TrainSeedParams
from rtscore.stages import TrainResult
from tasks import train as t


@flow(name="train-seed")
def train_seed(params: TrainSeedParams) -> TrainResult:
    """Train one seed (``seed``, else training.seed of the config) from the run's datasets and stats; re-running
    resumes from resume_latest.pth."""
    with flow_run_scope():
        cfg = load_config(params)
        seed = params.seed_of(cfg)
        result = t.train_seed.with_options(refresh_cache=params.fresh)(
            params.run_dir, cfg, seed, params.fresh, params.parent_run_id
        )
        ui.publish_training(params.run_dir, cfg, [result], f"train-seed-{seed}")
        return result


@flow(name="multi-seed-train")
def multi_seed_train(params: MultiSeedParams) -> list[TrainResult]:
    """Train every seed (training.seeds by default) under one parent MLflow run; report mean ± std."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        parent = t.start_multiseed(params.run_dir, cfg, seeds)
        results = [
            t.train_seed.with_options(refresh_cache=params.fresh)(params.run_dir, cfg, s, params.fresh, parent)
            for s in seeds
        ]
        t.finish_multiseed(params.run_dir, cfg, parent, results)
        ui.publish_training(params.run_dir, cfg, results, "multi-seed-train", parent_run_id=parent)
        return results
