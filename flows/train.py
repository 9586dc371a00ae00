"""Training flows: train-seed (one seed, built from its stage spec) and multi-seed-train (seeds [42, 43, 44] by
default, in sequence, under one parent MLflow run)."""

from __future__ import annotations

from flows import ui
from flows.common import StageArgs, flow_run_scope, load_config, run_namer, run_stage
from flows.failures import flow
from flows.params import MultiSeedParams, TrainSeedParams
from flows.stage_flow import stage_flow
from rtscore.stages import TrainResult
from rtscore.stages.multi_seed import SPEC as MULTI_SEED_TRAIN
from rtscore.stages.train import SPEC as TRAIN_SEED
from tasks import train as t

REDO: StageArgs = {"fresh": True}  # a trained seed whose recorded weights were lost is trained again from scratch

train_seed = stage_flow(
    TRAIN_SEED,
    TrainSeedParams,
    TrainResult,
    lambda params, cfg, result: ui.publish_training(params.run_dir, cfg, [result], f"train-seed-{result.result.seed}"),
    module=__name__,
    description="Train one seed (``seed``, else training.seed of the config) from the run's datasets and stats; "
    "re-running resumes from resume_latest.pth.",
    task=t.train_seed,
    extra=lambda params: {"fresh": params.fresh, "parent_run_id": params.parent_run_id},
    redo=REDO,
)


@flow(name=MULTI_SEED_TRAIN.name, flow_run_name=run_namer(MULTI_SEED_TRAIN.name, MultiSeedParams, ("seeds",)))
def multi_seed_train(params: MultiSeedParams) -> list[TrainResult]:
    """Train every seed (training.seeds by default) under one parent MLflow run; report mean ± std."""
    with flow_run_scope():
        cfg = load_config(params)
        seeds = params.seeds or cfg.training.seeds
        parent = t.start_multiseed(params.run_dir, cfg, seeds, params.parent_run_id, params.overrides)
        results = [
            run_stage(
                t.train_seed,
                params.run_dir,
                cfg,
                seed=s,
                fresh=params.fresh,
                parent_run_id=parent,
                refresh=params.fresh,
                redo=REDO,
            )
            for s in seeds
        ]
        t.finish_multiseed(params.run_dir, cfg, parent, results)
        ui.publish_training(params.run_dir, cfg, results, MULTI_SEED_TRAIN.name, parent_run_id=parent)
        return results
