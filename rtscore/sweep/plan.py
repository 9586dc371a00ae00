"""A sweep's plan, made and checked before any work: each variant's config (the base with its overrides), its run
directory, and the identity of each stage run it needs (the stage registry's :func:`planned_key`); a stage run
whose identity an earlier variant has is computed once, there, and adopted by the others.

Refused before anything runs, naming the variant and the key: an override that fails validation, a deciding metric
that is not a validation metric training records, a variant that changes the seeds (the sweep's own axis), an
override that makes a variant's val or test tiles (or the metric's definition) differ from the baseline's, and a
variant that trains exactly as another does.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, JsonValue

from rtscore.config.base import ConfigError
from rtscore.config.overrides import describe
from rtscore.config.pipeline import PipelineConfig, load_pipeline_config
from rtscore.identity import digest
from rtscore.stages.registry import planned_key, spec
from rtscore.stages.spec import StageSpec
from rtscore.storage import RunDir, SweepLayout
from rtscore.sweep.config import SweepConfig
from rtscore.train.loop import epoch_metric_names

# The stages a sweep runs for every variant, first to last, with the selections of each (train-seed: per seed).
DATA_STAGES = ("generate-dataset", "normalization-stats", "validate-data")
TRAIN_STAGE = "train-seed"
SPLIT_SELECTIONS: tuple[dict[str, Any], ...] = ({"split": "train"}, {"split": "val"}, {"split": "test"})
PLAN_NAME = SweepLayout.PLAN.at()
# Splits whose tiles every variant must share: a comparison on other val tiles, or a test on other test tiles, says
# nothing about the change.
COMPARED_SPLITS = ("val", "test")
# Not metrics of a model's quality (counts, weights, bootstrap spreads): never a deciding metric.
_NOT_QUALITY = (
    "n_pos_tiles",
    "n_neg_tiles",
    "neg_weight",
    "effective_neg",
    "no_skill",
    "boot_std",
    "ci_low",
    "ci_high",
)
LOWER_IS_BETTER = ("val_loss", "val_logit_overflow_fraction")


class SweepError(ConfigError):
    """A sweep that cannot be run as written; the message names the variant and the key."""


class PlannedStage(BaseModel):
    """One stage run of one variant."""

    stage: str = Field(..., description="The stage (registry name).")
    params: dict[str, JsonValue] = Field(..., description="Its parameters (split, seed).")
    key: str = Field(..., description="Its planned identity (rtscore.stages.registry.planned_key).")
    owner: str = Field(..., description="The variant that computes it (itself, or the first with the same key).")

    @property
    def label(self) -> str:
        return " ".join([self.stage, *(f"{k}={v}" for k, v in self.params.items())])


class PlannedVariant(BaseModel):
    name: str
    overrides: dict[str, JsonValue]
    run_dir: str
    stages: list[PlannedStage]

    def shared(self) -> dict[str, str]:
        """'<stage> <params>' -> the variant computing it, for the stage runs it adopts."""
        return {s.label: s.owner for s in self.stages if s.owner != self.name}


class SweepPlan(BaseModel):
    """``plan.json``: what the sweep runs and shares (rewritten when seeds are added)."""

    name: str
    base_config: str
    sweep_dir: str
    baseline: str
    seeds: list[int]
    metric: str
    variants: list[PlannedVariant]

    def variant(self, name: str) -> PlannedVariant:
        return next(v for v in self.variants if v.name == name)


def variant_config(base: Path, name: str, overrides: Mapping[str, Any]) -> PipelineConfig:
    """The config of a variant: ``base`` with its overrides, validated (SweepError naming the variant)."""
    try:
        return load_pipeline_config(base, overrides)
    except ConfigError as err:
        raise SweepError(f"variant {name}: {err}") from None


def check_metric(metric: str, cfg: PipelineConfig) -> None:
    """A deciding metric is a validation metric of model quality that training records."""
    if metric.startswith("test"):
        raise SweepError(
            f"metric: {metric} is a test metric; a choice is never made on the test split (guide §13.1): name a "
            "validation metric, e.g. val_realistic_pr_auc_geomean"
        )
    if not metric.startswith("val_") or any(part in metric for part in _NOT_QUALITY):
        raise SweepError(
            f"metric: {metric} is not a validation metric of model quality; use one that training records per epoch "
            f"(metrics.jsonl), e.g. val_realistic_pr_auc_geomean or val_realistic_pr_auc_1_{cfg.metrics.ratios[0]}"
        )
    names = deciding_metrics(cfg)
    if metric not in names:  # a misspelt name, or a ratio or IoU threshold the config does not compute
        close = difflib.get_close_matches(metric, names, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        raise SweepError(
            f"metric: {metric} is not among the validation metrics training records per epoch under this config "
            f"(metrics.jsonl); {hint}the metrics a sweep can decide on: {', '.join(names)}"
        )


def deciding_metrics(cfg: PipelineConfig) -> list[str]:
    """The metrics a sweep under ``cfg`` may decide on: the validation metrics of model quality each validated epoch
    records (its ratios and IoU thresholds), not counts, weights or bootstrap spreads."""
    return [n for n in epoch_metric_names(cfg) if not any(part in n for part in _NOT_QUALITY)]


def comparison_identity(cfg: PipelineConfig, split: str) -> str:
    """What must be equal between variants for their comparison to mean something: the tiles of ``split`` (its
    generation, the tile size, the labels and which tiles are used, the split rules) and the metrics' definition."""
    data = cfg.model_dump(mode="json")
    d = data["data"]
    picked = {
        "generation": d["generation"].get(split),
        **{k: d[k] for k in ("tile_size", "mask_type", "nodata_handling", "exclude_full_nodata", "skip_generation")},
        "splits": data["splits"],
        "metrics": data["metrics"],
    }
    return digest(picked)


def _differing_keys(overrides: Mapping[str, Any], baseline: Mapping[str, Any]) -> list[str]:
    keys = sorted(set(overrides) | set(baseline))
    return [k for k in keys if overrides.get(k) != baseline.get(k)]


def plan_sweep(sweep: SweepConfig, base: Path, sweep_dir: str, seeds: list[int] | None = None) -> SweepPlan:
    """Every variant's config and stage runs, and who computes each; refuses a sweep that cannot be judged."""
    named = sweep.all_variants()
    cfgs = _variant_configs(base, named)
    baseline = cfgs[sweep.baseline]
    check_metric(sweep.metric, baseline)
    seeds = seeds or sweep.seeds or list(baseline.training.seeds)
    _check_seeds_unchanged(cfgs, sweep.baseline, seeds)
    _check_same_tiles(cfgs, named, sweep.baseline)
    owners: dict[str, str] = {}  # planned key -> the first variant with it
    variants = [_plan_variant(name, cfg, named, sweep_dir, seeds, owners) for name, cfg in cfgs.items()]
    return SweepPlan(
        name=sweep.name or "sweep",
        base_config=str(base),
        sweep_dir=sweep_dir,
        baseline=sweep.baseline,
        seeds=seeds,
        metric=sweep.metric,
        variants=variants,
    )


def _variant_configs(base: Path, named: dict[str, dict[str, JsonValue]]) -> dict[str, PipelineConfig]:
    """Every variant's validated config, by name in the sweep's order; every invalid variant is named at once,
    not the first only, so that one fix round suffices.

    Raises:
        SweepError: one line per invalid variant.
    """
    cfgs: dict[str, PipelineConfig] = {}
    errors: list[str] = []
    for name, ov in named.items():
        try:
            cfgs[name] = variant_config(base, name, ov)
        except SweepError as err:
            errors.append(str(err))
    if errors:
        raise SweepError("\n".join(errors))
    return cfgs


def _check_seeds_unchanged(cfgs: dict[str, PipelineConfig], baseline_name: str, seeds: list[int]) -> None:
    """Refuse a variant whose ``training.seeds`` or ``training.seed`` differ from the baseline's: seeds are the
    sweep's own axis (every variant trains the sweep's seeds), so a variant's seeds would never be trained, and one
    that changes only its seeds would train the baseline's seeds again under another name.

    Raises:
        SweepError: one line per such variant, naming it and the key.
    """
    base = cfgs[baseline_name].training
    errors: list[str] = []
    for name, cfg in cfgs.items():
        changed = [
            f"training.{key} ({getattr(cfg.training, key)}; the baseline's: {getattr(base, key)})"
            for key in ("seeds", "seed")
            if getattr(cfg.training, key) != getattr(base, key)
        ]
        if name != baseline_name and changed:
            errors.append(
                f"variant {name}: {', '.join(changed)} changes seeds, the sweep's own axis: every variant trains "
                f"the sweep's seeds ({', '.join(map(str, seeds))}), so it would train them again, not its own; set "
                "seeds: in the sweep file, and let a variant change what training reads (the loss, the model, the "
                "train data)"
            )
    if errors:
        raise SweepError("\n".join(errors))


def _check_same_tiles(
    cfgs: dict[str, PipelineConfig], named: dict[str, dict[str, JsonValue]], baseline_name: str
) -> None:
    """Refuse a variant whose val or test tiles, or metric computation, differ from the baseline's: variants are
    judged against each other on the same tiles, so such a variant could not be compared.

    Raises:
        SweepError: naming the first such variant, the split, and the override keys most likely responsible.
    """
    baseline = cfgs[baseline_name]
    for name, cfg in cfgs.items():
        for split in COMPARED_SPLITS:
            if name != baseline_name and comparison_identity(cfg, split) != comparison_identity(baseline, split):
                differing = _differing_keys(named[name], named[baseline_name])
                keys = [
                    k
                    for k in differing
                    if k.split(".")[0] in ("data", "splits", "metrics") and not k.startswith("data.generation.train")
                ] or differing
                raise SweepError(
                    f"variant {name}: {', '.join(keys)} changes the {split} tiles or how the metrics are computed "
                    f"against the baseline variant {baseline_name}; variants are compared on the same val tiles and "
                    "tested on the same test tiles (change the train split's data, the channels taken from a store, "
                    "or anything else)"
                )


def _plan_variant(
    name: str,
    cfg: PipelineConfig,
    named: dict[str, dict[str, JsonValue]],
    sweep_dir: str,
    seeds: list[int],
    owners: dict[str, str],
) -> PlannedVariant:
    """One variant's stage runs (data stages, then training per seed), each owned by the first variant that plans
    its key (``owners``, shared across variants and updated here), so that a shared data stage runs once.

    Raises:
        SweepError: the variant's training is another variant's (nothing training reads differs), so its
            validation metric could not differ either.
    """
    run = RunDir(variant_dir(sweep_dir, name))
    upstream: dict[str, str] = {}
    stages: list[PlannedStage] = []
    for stage in (*DATA_STAGES, TRAIN_STAGE):
        selections = _selections(spec(stage), seeds)
        for sel in selections:
            key = planned_key(stage, cfg, sel, run, upstream)
            planned = PlannedStage(stage=stage, params=sel, key=key, owner=owners.setdefault(key, name))
            stages.append(planned)
            upstream[planned.label] = key
    first_train = next(s for s in stages if s.stage == TRAIN_STAGE)
    if first_train.owner != name:
        same = first_train.owner
        what = describe(named[name]) if named[name] else "no override"
        raise SweepError(
            f"variant {name} ({what}) trains exactly as variant {same}: nothing training reads differs, so its "
            "validation metric would be the same (a calibration or deployment setting is chosen by the "
            "calibration gates, guide §11, not by a sweep)"
        )
    return PlannedVariant(name=name, overrides=named[name], run_dir=run.uri, stages=stages)


def variant_dir(sweep_dir: str, name: str) -> str:
    """The run directory of variant ``name`` in the sweep directory ``sweep_dir`` (a local path or a gs:// URI)."""
    sweep = RunDir(sweep_dir)
    rel = SweepLayout.VARIANT.at(variant=name)
    return f"{sweep.uri}/{rel}" if sweep.remote else str(sweep.path(rel))


def _selections(stage: StageSpec, seeds: list[int]) -> list[dict[str, Any]]:
    if "split" in stage.params:
        return [dict(s) for s in SPLIT_SELECTIONS]
    if "seed" in stage.params:
        return [{"seed": s} for s in seeds]
    return [{}]


def plan_json(plan: SweepPlan) -> str:
    return json.dumps(plan.model_dump(mode="json"), indent=2) + "\n"


__all__ = [
    "COMPARED_SPLITS",
    "DATA_STAGES",
    "LOWER_IS_BETTER",
    "PLAN_NAME",
    "TRAIN_STAGE",
    "PlannedStage",
    "PlannedVariant",
    "SweepError",
    "SweepPlan",
    "check_metric",
    "comparison_identity",
    "deciding_metrics",
    "plan_json",
    "plan_sweep",
    "variant_config",
    "variant_dir",
]
