from __future__ import annotations

import pytest

from rtscore.config.pipeline import EarlyStoppingConfig
from rtscore.train.early_stopping import EarlyStopping


def test_smoothing_patience_min_delta_and_start_epoch() -> None:
    es = EarlyStopping(EarlyStoppingConfig(patience=2, min_delta=0.01, start_epoch=30, smoothing_window=3))
    d = es.update(10, 0.30)
    assert d.smoothed == pytest.approx(0.30) and d.is_best and not d.stop
    d = es.update(20, 0.60)
    assert d.smoothed == pytest.approx(0.45) and d.is_best
    # flat but before start_epoch: not counted
    d = es.update(25, 0.45)
    assert round(d.smoothed, 6) == 0.45 and not d.is_best and d.bad_events == 0 and not d.stop
    d = es.update(30, 0.455)  # smoothed (0.6 + 0.45 + 0.455) / 3 = 0.50166: +0.0517 over ref 0.45 -> improvement
    assert d.bad_events == 0 and d.is_best
    d = es.update(35, 0.50)  # (0.45 + 0.455 + 0.5)/3 = 0.4683: no gain
    assert d.bad_events == 1 and not d.stop
    d = es.update(40, 0.50)  # 0.485: still below 0.50166 + 0.01
    assert d.bad_events == 2 and d.stop


def test_state_roundtrip_keeps_history_not_settings() -> None:
    a = EarlyStopping(EarlyStoppingConfig(patience=1, min_delta=0.0, start_epoch=1))
    a.update(1, 0.2)
    a.update(2, 0.1)
    b = EarlyStopping(EarlyStoppingConfig(patience=5, min_delta=0.0, start_epoch=1))
    b.load_state_dict(a.state_dict())
    assert b.history == a.history and b.cfg.patience == 5
    assert not b.update(3, 0.1).stop  # the new config's patience applies
