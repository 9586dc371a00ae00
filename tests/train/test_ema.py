from __future__ import annotations

import torch

from rtscore.config.pipeline import EMAConfig
from rtscore.train.ema import EMA


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Conv2d(4, 1, 1)
    )


def test_update_is_exponential_average_of_params_and_buffers() -> None:
    m = _model()
    ema = EMA(m, decay=0.9)
    w0 = m[0].weight.detach().clone()
    with torch.no_grad():
        m[0].weight.add_(1.0)
        m[1].running_mean.add_(2.0)
        m[1].num_batches_tracked.add_(5)
    ema.update(m)
    torch.testing.assert_close(ema.shadow["0.weight"], 0.9 * w0 + 0.1 * (w0 + 1.0))
    torch.testing.assert_close(ema.shadow["1.running_mean"], torch.full((4,), 0.2))  # BN buffers averaged too
    assert int(ema.shadow["1.num_batches_tracked"]) == 5  # integer buffers copied
    assert not any(t.requires_grad for t in ema.shadow.values())


def test_default_decay_is_the_guides_constant() -> None:
    """Guide §9.1: decay 0.999 from the first update on; the warm-up ramp is opt-in (ema.warmup)."""
    cfg = EMAConfig()
    ema = EMA(_model(), cfg.decay, cfg.warmup)
    assert ema.current_decay() == 0.999
    ema.updates = 3
    assert ema.current_decay() == 0.999


def test_warmup_ramps_the_decay() -> None:
    ema = EMA(_model(), decay=0.999, warmup=True)
    assert ema.current_decay() == 0.1
    ema.updates = 10_000
    assert ema.current_decay() == 0.999


def test_swap_restores_live_state_byte_identically_bn_included() -> None:
    """The guide's unit test: state_dict before == after a validation run through the swap."""
    m = _model()
    ema = EMA(m, decay=0.5)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn_like(p))
    m.train()
    m(torch.randn(2, 3, 8, 8))  # live BN running stats move
    ema.update(m)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    with ema.swapped_in(m) as swapped:
        for k, v in swapped.state_dict().items():
            assert torch.equal(v, ema.shadow[k])
        swapped.eval()
        with torch.no_grad():
            swapped(torch.randn(2, 3, 8, 8))
    after = m.state_dict()
    for k in before:
        assert before[k].dtype == after[k].dtype
        assert before[k].numpy().tobytes() == after[k].numpy().tobytes(), k


def test_swap_restores_even_when_validation_raises() -> None:
    m = _model()
    ema = EMA(m, decay=0.5)
    with torch.no_grad():
        m[0].weight.add_(3.0)
    live = m[0].weight.detach().clone()
    try:
        with ema.swapped_in(m):
            raise RuntimeError("validation crashed")
    except RuntimeError:
        pass
    assert torch.equal(m[0].weight, live)
