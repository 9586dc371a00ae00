"""Stage specs: derived code fingerprints, the config each stage reads, layout-declared inputs and outputs."""

from __future__ import annotations

import pytest

from rtscore.stages import STAGES, code_closure, code_fingerprint, producers
from rtscore.stages.registry import spec
from rtscore.stages.spec import StageSpec, expand
from rtscore.storage import RunLayout
from tests.train.conftest import tiny_train_config

NAMES = [s.name for s in STAGES]


def closure(name: str) -> set[str]:
    return set(code_closure(spec(name).module)[0])


def test_the_code_fingerprint_is_the_import_closure_of_the_stage_module() -> None:
    # what each stage really runs is in its closure, found from the imports alone (function-local ones too)
    assert {"rtscore.losses.focal", "rtscore.train.loop", "rtscore.metrics.histograms"} <= closure("train-seed")
    assert "rtscore.data.normalization.stats" in closure("normalization-stats")
    assert "rtscore.package.verify" in closure("package")
    assert {"rtscore.calibrate.cache", "rtscore.inference.numerics"} <= closure("logit-cache")
    # ... and nothing it does not import
    assert not any(m.startswith("rtscore.data.synthetic") for m in closure("train-seed")), "dataset -> generator"
    assert not any(m.startswith("rtscore.losses") for m in closure("evaluate-test"))
    assert not any(m.startswith("rtscore.package") for m in closure("logit-cache"))
    assert "rtscore.data.normalization.stats" not in closure("generate-dataset")
    for name in NAMES:
        assert len(code_fingerprint(name)) == 64
    assert code_fingerprint("generate-dataset") != code_fingerprint("train-seed")
    third_party = code_closure(spec("train-seed").module)[1]
    assert {"torch", "segmentation_models_pytorch"} <= set(third_party) and "os" not in third_party


def test_producers_follow_the_declared_inputs() -> None:
    assert [p.name for p in producers(spec("normalization-stats"))] == ["generate-dataset"]
    # the package records the train store's raster contract: the store is one of its inputs
    assert {p.name for p in producers(spec("package"))} == {
        "generate-dataset",
        "normalization-stats",
        "train-seed",
        "calibrate",
    }
    for i, stage in enumerate(STAGES):  # the registry is in pipeline order
        assert all(NAMES.index(p.name) < i for p in producers(stage)), stage.name


def test_stage_config_hash_follows_the_sections_a_stage_reads() -> None:
    cfg = tiny_train_config()
    target = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(update={"target_precision": 0.9})})
    candidates = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(update={"tta_candidates": ["none"]})})
    epochs = cfg.model_copy(update={"training": cfg.training.model_copy(update={"max_epochs": 9})})
    shipped = cfg.model_copy(update={"package": cfg.package.model_copy(update={"seed": 43})})
    buffer = cfg.model_copy(update={"splits": cfg.splits.model_copy(update={"min_distance_m": 1000.0})})

    def changed(other) -> set[str]:  # type: ignore[no-untyped-def]
        return {s.name for s in STAGES if s.config_hash(cfg) != s.config_hash(other)}

    # A decision setting re-runs calibration and what follows: never training, never the logit cache.
    assert changed(target) == {"calibrate", "evaluate-test", "package"}
    assert changed(candidates) == {"logit-cache", "calibrate", "evaluate-test", "package"}
    assert changed(epochs) == {"train-seed", "logit-cache", "calibrate", "evaluate-test", "package"}
    # the shipped seed is decided in calibration: package.seed is read there (and by the package)
    assert changed(shipped) == {"calibrate", "package"}
    # a stricter geographic buffer between the splits re-runs the check, never the datasets, stats or training
    assert changed(buffer) == {"validate-data"}


def test_devices_key_the_stages_by_the_effective_batch() -> None:
    """training.batch_size is per device: N devices of b are the work of one device of N x b (the same key), N of b
    another than one of b; auto is keyed as auto (the machine decides N; the resume key holds the resolved one)."""
    cfg = tiny_train_config()  # 1 device x 4
    epochs = cfg.model_copy(update={"training": cfg.training.model_copy(update={"max_epochs": 9})})

    def changed(other) -> set[str]:  # type: ignore[no-untyped-def]
        return {s.name for s in STAGES if s.config_hash(cfg) != s.config_hash(other)}

    training = changed(epochs)  # the stages that read the training loop's settings
    # 2 x 2: training's effective 4, as 1 x 4; the data check plans one device's batches, of batch_size (2 now)
    assert changed(tiny_train_config(devices=2, batch_size=2)) == {"validate-data"}
    assert changed(tiny_train_config(devices=2)) == training  # 2 x 4: effective 8
    assert changed(tiny_train_config(devices="auto")) == training


def test_inputs_expand_per_seed_and_split() -> None:
    entries = (RunLayout.DATASET.bind(split="val"), RunLayout.BEST_WEIGHTS)
    assert expand(entries, {"seeds": [1, 2]}) == [
        "datasets/val.zarr",
        "seeds/seed_1/best_deployment.pth",
        "seeds/seed_2/best_deployment.pth",
    ]
    assert expand((RunLayout.DATASET,), {"split": "test"}) == ["datasets/test.zarr"]


def test_a_stage_may_only_record_its_declared_outputs() -> None:
    s = spec("calibrate")
    assert s.output_entry("calibration/seed_7/calibration_report.json") is RunLayout.SEED_CALIBRATION_REPORT
    with pytest.raises(ValueError, match="not among its declared outputs"):
        s.output_entry("seeds/seed_7/best_deployment.pth")


def test_unknown_config_sections_are_a_bug_in_the_spec() -> None:
    bad = StageSpec(
        name="x", fn=test_unknown_config_sections_are_a_bug_in_the_spec, inputs=(), outputs=(), config=("nope",)
    )
    with pytest.raises(KeyError, match="nope"):
        bad.config_hash(tiny_train_config())
