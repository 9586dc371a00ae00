from __future__ import annotations

import math

import pytest

from rtscore.config.pipeline import LRScheduleConfig
from rtscore.train.schedule import cosine_t_max, lr_at

GUIDE = LRScheduleConfig()  # frozen 1e-3, base 1e-4, x0.1 backbone, freeze 10, warmup 5, start 1e-6, min 1e-6


def test_t_max_is_guide_value() -> None:
    assert cosine_t_max(GUIDE, 300) == 285


@pytest.mark.parametrize("epoch", [1, 10])
def test_frozen_phase(epoch: int) -> None:
    lr = lr_at(epoch, GUIDE, 300)
    assert (lr.decoder, lr.encoder, lr.frozen) == (1e-3, 0.0, True)


def test_warmup_boundaries() -> None:
    first = lr_at(11, GUIDE, 300)
    assert not first.frozen and first.decoder == pytest.approx(1e-6) and first.encoder == pytest.approx(1e-7)
    # epoch 15 is the last warmup epoch: 1e-6 + (1e-4 - 1e-6) * 4 / 5
    assert lr_at(15, GUIDE, 300).decoder == pytest.approx(1e-6 + (1e-4 - 1e-6) * 4 / 5)


def test_cosine_boundaries() -> None:
    assert lr_at(16, GUIDE, 300).decoder == pytest.approx(1e-4)  # cosine starts at base_lr
    assert lr_at(16, GUIDE, 300).encoder == pytest.approx(1e-5)
    mid = 16 + 285 // 2  # t = 142 of 285
    expected = 1e-6 + (1e-4 - 1e-6) * (1 + math.cos(math.pi * 142 / 285)) / 2
    assert lr_at(mid, GUIDE, 300).decoder == pytest.approx(expected)
    assert lr_at(300, GUIDE, 300).decoder == pytest.approx(
        1e-6 + (1e-4 - 1e-6) * (1 + math.cos(math.pi * 284 / 285)) / 2
    )
    assert lr_at(300, GUIDE, 300).decoder > GUIDE.min_lr
    assert lr_at(301, GUIDE, 300).decoder == pytest.approx(GUIDE.min_lr)


def test_no_warmup_no_freeze() -> None:
    cfg = LRScheduleConfig(freeze_backbone_epochs=0, warmup_epochs=0)
    assert lr_at(1, cfg, 10).decoder == pytest.approx(cfg.base_lr) and not lr_at(1, cfg, 10).frozen
