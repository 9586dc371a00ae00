from __future__ import annotations

from pathlib import Path

import rtscore
from rtscore.stages import STAGE_MODULES, stage_code_hash


def test_stage_code_hash_covers_existing_modules() -> None:
    root = Path(rtscore.__file__).parent
    for stage, modules in STAGE_MODULES.items():
        for rel in modules:
            assert (root / rel).exists(), f"{stage}: {rel} was moved or renamed; update STAGE_MODULES"
        assert len(stage_code_hash(stage)) == 64
    assert stage_code_hash("generate-dataset") != stage_code_hash("train-seed")


def test_stage_config_hash_follows_the_sections_a_stage_uses() -> None:
    from rtscore.stages import STAGES, stage_config_hash
    from tests.train.conftest import tiny_train_config

    cfg = tiny_train_config()
    target = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(update={"target_precision": 0.9})})
    candidates = cfg.model_copy(update={"calibration": cfg.calibration.model_copy(update={"tta_candidates": ["none"]})})
    epochs = cfg.model_copy(update={"training": cfg.training.model_copy(update={"max_epochs": 9})})

    def changed(other) -> set[str]:  # type: ignore[no-untyped-def]
        return {s for s in STAGES if stage_config_hash(s, cfg) != stage_config_hash(s, other)}

    # A decision setting re-runs calibration and what follows: never training, never the logit cache.
    assert changed(target) == {"calibrate", "evaluate-test", "package"}
    assert changed(candidates) == {"logit-cache", "calibrate", "evaluate-test", "package"}
    assert changed(epochs) == {"train-seed", "logit-cache", "calibrate", "evaluate-test", "package"}
