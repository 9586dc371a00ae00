"""A sweep's plan, made before any work: each variant's config, run directory and planned stage identities, which
variant computes each shared stage run (the stage registry decides), and every sweep that could not be judged
refused with the variant and the key named, nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtscore.config.base import parse_config
from rtscore.config.pipeline import load_pipeline_config
from rtscore.stages.registry import planned_key
from rtscore.storage import RunDir
from rtscore.sweep.config import SweepConfig
from rtscore.sweep.plan import (
    DATA_STAGES,
    TRAIN_STAGE,
    SweepError,
    SweepPlan,
    comparison_identity,
    deciding_metrics,
    plan_json,
    plan_sweep,
)
from tests.flows.configs import tiny_training_config, write_config

SPLIT_STORES = ("generate-dataset split=train", "generate-dataset split=val", "generate-dataset split=test")
DATA_RUNS = (*SPLIT_STORES, "normalization-stats", "validate-data")


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The tiny training config, its stores generating two EXTRA channels (ndvi, slope) that the model takes both."""
    data = tiny_training_config()
    for gen in data["data"]["generation"].values():
        gen["synthetic"]["extra_channels"] = ["ndvi", "slope"]
    data["channels"]["extra"] = [{"name": "ndvi", "band": 0}, {"name": "slope", "band": 1}]
    return write_config(tmp_path / "configs" / "pipeline.yaml", data)


def _plan(base: Path, sweep_dir: Path, variants: dict[str, dict[str, Any]], **more: Any) -> SweepPlan:
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": variants, **more}, source="sweep.yaml")
    return plan_sweep(sweep, base, str(sweep_dir))


def _refused(base: Path, tmp_path: Path, variants: dict[str, dict[str, Any]], *needles: str, **more: Any) -> str:
    sweep_dir = tmp_path / "sweep"
    with pytest.raises(SweepError) as err:
        _plan(base, sweep_dir, variants, **more)
    text = str(err.value)
    for needle in needles:
        assert needle in text, f"{needle!r} not in: {text}"
    assert not sweep_dir.exists(), "refused before any work: nothing written"
    return text


# ----------------------------------------------------------------------------------------------- what is planned
def test_each_variant_has_its_run_directory_and_every_stage_run(base: Path, tmp_path: Path) -> None:
    plan = _plan(base, tmp_path / "sweep", {"gamma": {"loss.focal_gamma": 1.0}}, seeds=[5, 6, 7])
    assert [v.name for v in plan.variants] == ["baseline", "gamma"] and plan.baseline == "baseline"
    assert plan.seeds == [5, 6, 7] and plan.metric == "val_realistic_pr_auc_geomean"
    gamma = plan.variant("gamma")
    assert gamma.run_dir == RunDir(str(tmp_path / "sweep" / "variants" / "gamma")).uri
    assert gamma.overrides == {"loss.focal_gamma": 1.0}
    labels = [s.label for s in gamma.stages]
    assert labels == [*DATA_RUNS, "train-seed seed=5", "train-seed seed=6", "train-seed seed=7"]
    assert {s.stage for s in gamma.stages} == {*DATA_STAGES, TRAIN_STAGE}
    assert SweepPlan.model_validate_json(plan_json(plan)) == plan, "plan.json reads back as the plan"


def test_the_seeds_default_to_the_base_configs(base: Path, tmp_path: Path) -> None:
    plan = _plan(base, tmp_path / "sweep", {"gamma": {"loss.focal_gamma": 1.0}})
    assert plan.seeds == load_pipeline_config(base).training.seeds == [1, 2]
    sweep = parse_config(SweepConfig, {"base": str(base), "variants": {"g": {"loss.focal_gamma": 1.0}}, "seeds": [3]})
    assert plan_sweep(sweep, base, str(tmp_path / "s"), seeds=[3, 4]).seeds == [3, 4], "added seeds: the flow's"


# ----------------------------------------------------------------------------------------------- sharing (registry)
def test_a_loss_variant_shares_the_datasets_stats_and_validation(base: Path, tmp_path: Path) -> None:
    plan = _plan(base, tmp_path / "sweep", {"gamma": {"loss.focal_gamma": 1.0}})
    assert plan.variant("baseline").shared() == {}, "the baseline computes all it needs"
    assert plan.variant("gamma").shared() == dict.fromkeys(DATA_RUNS, "baseline")
    keys = {v.name: {s.label: s.key for s in v.stages} for v in plan.variants}
    for label in DATA_RUNS:
        assert keys["gamma"][label] == keys["baseline"][label]
    for seed in plan.seeds:
        assert keys["gamma"][f"train-seed seed={seed}"] != keys["baseline"][f"train-seed seed={seed}"]


def test_a_boundary_handling_variant_shares_the_datasets_and_stats_but_not_validation(
    base: Path, tmp_path: Path
) -> None:
    """validate-data checks the training loader, which reads loss.boundary_handling (the ignore band)."""
    plan = _plan(base, tmp_path / "sweep", {"ignore": {"loss.boundary_handling": "ignore"}})
    assert plan.variant("ignore").shared() == dict.fromkeys((*SPLIT_STORES, "normalization-stats"), "baseline")


def test_choosing_extra_channels_out_of_one_store_shares_the_stores_only(base: Path, tmp_path: Path) -> None:
    """The stores hold every channel their generation names: a variant taking fewer shares them; the statistics are
    of the channels taken, so they (and all after them) are its own."""
    plan = _plan(
        base,
        tmp_path / "sweep",
        {"slope": {"channels.extra": [{"name": "slope", "band": 1}]}, "rgb": {"channels.extra": []}},
    )
    for name in ("slope", "rgb"):
        assert plan.variant(name).shared() == dict.fromkeys(SPLIT_STORES, "baseline"), name


def test_a_train_data_variant_computes_its_own_train_store_stats_and_validation(base: Path, tmp_path: Path) -> None:
    plan = _plan(base, tmp_path / "sweep", {"more_pos": {"data.generation.train.synthetic.n_positive": 12}})
    shared = plan.variant("more_pos").shared()
    for label in ("generate-dataset split=train", "normalization-stats", "validate-data"):
        assert label not in shared, label
    assert not any(label.startswith(TRAIN_STAGE) for label in shared)


def test_a_train_data_variant_shares_the_val_and_test_stores(base: Path, tmp_path: Path) -> None:
    plan = _plan(base, tmp_path / "sweep", {"more_pos": {"data.generation.train.synthetic.n_positive": 12}})
    shared = plan.variant("more_pos").shared()
    assert shared == dict.fromkeys(("generate-dataset split=val", "generate-dataset split=test"), "baseline")


def test_a_shared_stage_run_is_computed_by_the_first_variant_that_needs_it(base: Path, tmp_path: Path) -> None:
    plan = _plan(
        base,
        tmp_path / "sweep",
        {
            "slope": {"channels.extra": [{"name": "slope", "band": 1}]},
            "slope_gamma": {"channels.extra": [{"name": "slope", "band": 1}], "loss.focal_gamma": 1.0},
        },
    )
    shared = plan.variant("slope_gamma").shared()
    assert {label: shared[label] for label in SPLIT_STORES} == dict.fromkeys(SPLIT_STORES, "baseline")
    assert shared["normalization-stats"] == shared["validate-data"] == "slope", "the stats of slope alone: slope's"


def test_train_seed_is_never_shared(base: Path, tmp_path: Path) -> None:
    plan = _plan(
        base,
        tmp_path / "sweep",
        {
            "gamma": {"loss.focal_gamma": 1.0},
            "ignore": {"loss.boundary_handling": "ignore"},
            "rgb": {"channels.extra": []},
        },
    )
    train_keys = [s.key for v in plan.variants for s in v.stages if s.stage == TRAIN_STAGE]
    assert len(train_keys) == len(set(train_keys)) == 4 * len(plan.seeds)
    assert all(s.owner == v.name for v in plan.variants for s in v.stages if s.stage == TRAIN_STAGE)


def test_planned_keys_do_not_depend_on_where_the_sweep_is(base: Path, tmp_path: Path) -> None:
    variants: dict[str, dict[str, Any]] = {"gamma": {"loss.focal_gamma": 1.0}, "rgb": {"channels.extra": []}}
    here = _plan(base, tmp_path / "a" / "sweep", variants)
    there = _plan(base, tmp_path / "b" / "elsewhere", variants)
    assert here.variant("gamma").run_dir != there.variant("gamma").run_dir
    for v, w in zip(here.variants, there.variants, strict=True):
        assert [(s.label, s.key, s.owner) for s in v.stages] == [(s.label, s.key, s.owner) for s in w.stages]


def test_a_planned_key_changes_with_the_config_its_stage_reads(base: Path, tmp_path: Path) -> None:
    run = RunDir(str(tmp_path / "run"))
    cfg = load_pipeline_config(base)
    gamma = load_pipeline_config(base, {"loss.focal_gamma": 1.0})
    seed = {"seed": 1}
    assert planned_key("train-seed", cfg, seed, run, {}) == planned_key("train-seed", cfg, seed, run, {})
    assert planned_key("train-seed", cfg, seed, run, {}) != planned_key("train-seed", gamma, seed, run, {})
    assert planned_key("train-seed", cfg, seed, run, {}) != planned_key("train-seed", cfg, {"seed": 2}, run, {})
    val = {"split": "val"}
    assert planned_key("generate-dataset", cfg, val, run, {}) == planned_key("generate-dataset", gamma, val, run, {})
    assert planned_key("generate-dataset", cfg, val, run, {}) != planned_key(
        "generate-dataset", cfg, {"split": "test"}, run, {}
    )


def test_a_planned_key_changes_with_its_producers_keys_only(base: Path, tmp_path: Path) -> None:
    run = RunDir(str(tmp_path / "run"))
    cfg = load_pipeline_config(base)
    up = {"generate-dataset split=train": "a"}
    stats = planned_key("normalization-stats", cfg, {}, run, up)
    assert stats != planned_key("normalization-stats", cfg, {}, run, {"generate-dataset split=train": "b"})
    assert stats == planned_key("normalization-stats", cfg, {}, run, {**up, "train-seed seed=1": "x"}), (
        "a stage that does not produce its inputs leaves its identity alone"
    )


# ----------------------------------------------------------------------------------------------- refused
def test_an_override_of_an_unknown_key_is_refused_naming_the_variant_and_key(base: Path, tmp_path: Path) -> None:
    _refused(
        base,
        tmp_path,
        {"gamma": {"loss.focal_gamma": 1.0}, "typo": {"loss.boundary_handlin": "ignore"}},
        "variant typo: ",
        "with overrides loss.boundary_handlin=ignore",
        "loss.boundary_handlin: unknown key",
    )


def test_an_override_of_the_wrong_type_is_refused_naming_the_variant_and_key(base: Path, tmp_path: Path) -> None:
    _refused(base, tmp_path, {"steep": {"loss.focal_gamma": "steep"}}, "variant steep: ", "loss.focal_gamma")


def test_an_invalid_baseline_is_refused_naming_it(base: Path, tmp_path: Path) -> None:
    _refused(
        base,
        tmp_path,
        {"baseline": {"channels.extra": [{"name": "elevation", "band": 0}]}, "g": {"loss.focal_gamma": 1.0}},
        "variant baseline: ",
        "elevation",
    )


@pytest.mark.parametrize(
    ("overrides", "key", "split"),
    [
        ({"data.generation.val.synthetic.n_positive": 4}, "data.generation.val.synthetic.n_positive", "val"),
        ({"data.generation.val.seed": 9}, "data.generation.val.seed", "val"),
        ({"data.generation.test.synthetic.n_negative": 4}, "data.generation.test.synthetic.n_negative", "test"),
        ({"data.mask_type": "noisy"}, "data.mask_type", "val"),
        ({"data.nodata_handling": False}, "data.nodata_handling", "val"),
        ({"splits.min_test_positives": 2}, "splits.min_test_positives", "val"),
        ({"metrics.bootstrap_samples": 20}, "metrics.bootstrap_samples", "val"),
        ({"metrics.ratios": [100]}, "metrics.ratios", "val"),
    ],
)
def test_an_override_that_changes_the_compared_tiles_or_metrics_is_refused(
    base: Path, tmp_path: Path, overrides: dict[str, Any], key: str, split: str
) -> None:
    """Variants compared on other val tiles, tested on other test tiles or measured otherwise say nothing."""
    _refused(
        base,
        tmp_path,
        {"gamma": {"loss.focal_gamma": 1.0}, "other": overrides},
        f"variant other: {key} changes the {split} tiles",
        "baseline",
    )


def test_a_tile_size_override_is_refused_naming_the_key(base: Path, tmp_path: Path) -> None:
    sizes = {f"data.generation.{s}.tile_size": 96 for s in ("train", "val", "test")}
    text = _refused(base, tmp_path, {"big": {"data.tile_size": 96, **sizes}}, "variant big: ", "changes the val tiles")
    assert "data.tile_size" in text and "data.generation.val.tile_size" in text
    # The tile size alone already fails the config's own rule (the stores are of another size): also named.
    _refused(base, tmp_path, {"big": {"data.tile_size": 96}}, "variant big: ", "data.tile_size (96)")


def test_the_val_tiles_are_those_the_comparison_is_on(base: Path) -> None:
    cfg = load_pipeline_config(base)
    train = load_pipeline_config(base, {"data.generation.train.synthetic.n_positive": 12})
    loader = load_pipeline_config(base, {"training.batch_size": 2})
    for split in ("val", "test"):
        assert comparison_identity(train, split) == comparison_identity(cfg, split)
        assert comparison_identity(loader, split) == comparison_identity(cfg, split)
    val = load_pipeline_config(base, {"data.generation.val.synthetic.n_positive": 4})
    assert comparison_identity(val, "val") != comparison_identity(cfg, "val")
    assert comparison_identity(val, "test") == comparison_identity(cfg, "test")


@pytest.mark.parametrize("metric", ["test_realistic_pr_auc_geomean", "test_realistic_pr_auc_1_200", "test_loss"])
def test_a_test_metric_is_refused(base: Path, tmp_path: Path, metric: str) -> None:
    _refused(base, tmp_path, {"g": {"loss.focal_gamma": 1.0}}, f"metric: {metric} is a test metric", metric=metric)


@pytest.mark.parametrize(
    "metric", ["train_loss", "val_n_pos_tiles", "val_realistic_pr_auc_1_200_ci_low", "val_no_skill_1_200", "loss"]
)
def test_a_metric_not_of_validation_quality_is_refused(base: Path, tmp_path: Path, metric: str) -> None:
    _refused(
        base, tmp_path, {"g": {"loss.focal_gamma": 1.0}}, f"metric: {metric} is not a validation metric", metric=metric
    )


@pytest.mark.parametrize(
    ("metric", "close"),
    [
        ("val_realistic_pr_auc_geomaen", "val_realistic_pr_auc_geomean"),  # misspelt
        ("val_realistic_pr_auc_1_300", None),  # a ratio metrics.ratios does not hold
        ("val_balanced_object_f1_iou40", None),  # an IoU threshold the config does not compute
    ],
)
def test_a_metric_training_does_not_record_is_refused_naming_the_valid_ones(
    base: Path, tmp_path: Path, metric: str, close: str | None
) -> None:
    """Caught before any work: found missing only once every variant had trained, it was a traceback."""
    text = _refused(base, tmp_path, {"g": {"loss.focal_gamma": 1.0}}, f"metric: {metric} is not among", metric=metric)
    valid = text.rsplit("the metrics a sweep can decide on: ", 1)[1].split(", ")
    assert valid == deciding_metrics(load_pipeline_config(base))
    ratios = load_pipeline_config(base).metrics.ratios
    assert {"val_realistic_pr_auc_geomean", "val_loss", f"val_realistic_pr_auc_1_{ratios[0]}"} <= set(valid)
    assert not any("n_pos_tiles" in n or n.endswith("_ci_low") for n in valid), "counts and spreads never decide"
    if close:
        assert f"did you mean {close}?" in text


@pytest.mark.parametrize(
    "metric",
    [
        "val_loss",
        "val_realistic_pr_auc_1_200",
        "val_realistic_pr_auc_geomean",
        "val_realistic_pr_auc_geomean_smoothed",
        "val_balanced_object_f1_iou50",
    ],
)
def test_a_validation_metric_is_taken(base: Path, tmp_path: Path, metric: str) -> None:
    assert _plan(base, tmp_path / "sweep", {"g": {"loss.focal_gamma": 1.0}}, metric=metric).metric == metric


@pytest.mark.parametrize(
    "overrides",
    [
        {"calibration.allow_max_f1_fallback": False},
        {"calibration.target_precision": 0.9},
        {"mlflow.experiment_name": "elsewhere"},
    ],
)
def test_a_variant_that_trains_as_the_baseline_is_refused(
    base: Path, tmp_path: Path, overrides: dict[str, Any]
) -> None:
    key = next(iter(overrides))
    _refused(base, tmp_path, {"after": overrides}, f"variant after ({key}=", "trains exactly as variant baseline")


@pytest.mark.parametrize(
    "overrides",
    [
        {"training.seeds": [7, 8]},
        {"training.seed": 99},
        {"training.seeds": [7, 8], "loss.focal_gamma": 1.0},  # its seeds would be silently ignored
    ],
)
def test_a_variant_that_changes_the_seeds_is_refused_naming_it(
    base: Path, tmp_path: Path, overrides: dict[str, Any]
) -> None:
    """Seeds are the sweep's own axis: such a variant trained the baseline's seeds again under another name."""
    key = next(iter(overrides))
    text = _refused(
        base, tmp_path, {"gamma": {"loss.focal_gamma": 3.0}, "seedy": overrides}, f"variant seedy: {key} (", "seeds:"
    )
    assert "variant gamma" not in text


def test_two_variants_training_alike_are_refused_naming_both(base: Path, tmp_path: Path) -> None:
    _refused(
        base,
        tmp_path,
        {"gamma": {"loss.focal_gamma": 1.0}, "gamma_again": {"loss.focal_gamma": 1.0}},
        "variant gamma_again (loss.focal_gamma=1.0) trains exactly as variant gamma",
    )


def test_every_invalid_variant_is_named_at_once(base: Path, tmp_path: Path) -> None:
    with pytest.raises(SweepError) as err:
        _plan(base, tmp_path / "sweep", {"typo": {"loss.focal_gama": 1.0}, "neg": {"loss.focal_gamma": -1.0}})
    text = str(err.value)
    assert "variant typo" in text and "loss.focal_gama: unknown key" in text
    assert "variant neg" in text and "loss.focal_gamma" in text
    assert not (tmp_path / "sweep").exists(), "nothing written"
