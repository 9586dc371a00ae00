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
