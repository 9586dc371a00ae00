"""model.architecture dpt (rtscore/models/dpt.py): smp's DPT over a DINOv3 ViT from timm, the guide's §3.2 third
candidate; built like the other architectures (RGB + EXTRA early fusion, one logit), weights from a tag, a file or
nothing. Config-load rules: tests/config/test_pipeline.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rtscore.config.pipeline import DINOV3_VITS, ChannelsConfig, ExtraChannel, ModelConfig
from rtscore.models import ModelConfigError, build_model, decoder_parameters, encoder_parameters, load_model
from rtscore.package.format import PackagedChannels, PackagedModelConfig

FOUR = ChannelsConfig(extra=[ExtraChannel(name="ndvi", band=0)])
SMALL = "tu-vit_small_patch16_dinov3"
NARROW = [16, 16, 16, 16]  # a CPU-sized DPT decoder


def _dpt(backbone: str = SMALL, weights: str | None = None, **kw: object) -> ModelConfig:
    return ModelConfig(architecture="dpt", backbone=backbone, encoder_weights=weights, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def small() -> Any:  # Any: the tests reach into DPT's and timm's submodules
    torch.manual_seed(0)
    return build_model(_dpt(decoder_channels=NARROW), FOUR)


def test_the_dinov3_table_is_timms() -> None:
    """The config's list of dpt backbones and their pretrained tags is what the pinned timm ships."""
    import timm

    names = timm.list_models("vit_*dinov3*")
    tags = {n: sorted(p.split(".", 1)[1] for p in timm.list_pretrained(f"{n}.*")) for n in names}
    assert {n: sorted(t) for n, t in DINOV3_VITS.items()} == tags


@pytest.mark.parametrize("size", [32, 64])
def test_dpt_emits_one_logit_at_input_resolution(small: Any, size: int) -> None:
    small.eval()
    with torch.no_grad():
        out = small(torch.randn(2, 4, size, size))
    assert out.shape == (2, 1, size, size)
    assert not any(isinstance(m, torch.nn.Sigmoid) for m in small.modules())
    assert small.encoder.model.patch_embed.proj.weight.shape[1] == 4


def test_a_tile_the_config_refuses_fails_in_dpt(small: Any) -> None:
    """Why data.tile_size must be a multiple of 32, not only of the 16-px patch: 48 px (3x3 patches) breaks
    DPT's coarsest level, which halves the patch grid."""
    with torch.no_grad(), pytest.raises(RuntimeError, match="must match the size"):
        small.eval()(torch.randn(1, 4, 48, 48))


def test_one_training_step_reaches_encoder_and_decoder(small: Any) -> None:
    small.train()
    enc, dec = encoder_parameters(small), decoder_parameters(small)
    assert enc and dec and len(enc) + len(dec) == len(list(small.parameters()))
    before = [p.detach().clone() for p in (enc[0], dec[-1])]
    opt = torch.optim.AdamW(small.parameters(), lr=1e-3)
    x, y = torch.randn(2, 4, 32, 32), (torch.rand(2, 1, 32, 32) > 0.9).float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(small(x), y)
    loss.backward()
    assert torch.isfinite(loss)
    # Every parameter learns but the ViT's final norm: DPT reads the blocks' outputs before it (kept so that
    # pretrained state dicts load whole; AdamW skips a parameter without a gradient).
    no_grad = [n for n, p in small.named_parameters() if p.grad is None]
    assert no_grad == ["encoder.model.norm.weight", "encoder.model.norm.bias"]
    assert all(torch.isfinite(p.grad).all() for p in small.parameters() if p.grad is not None)
    opt.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, (enc[0], dec[-1]), strict=True))


def test_head_prior_starts_every_pixel_at_the_prior() -> None:
    torch.manual_seed(0)
    model: Any = build_model(_dpt(decoder_channels=NARROW, head_prior=0.01), FOUR).eval()
    with torch.no_grad():
        p = torch.sigmoid(model(torch.randn(2, 4, 64, 64)))
    assert abs(float(p.mean()) - 0.01) < 0.005 and float(p.max()) < 0.05
    out_conv = model.segmentation_head.head[-1]
    assert out_conv.bias.item() == pytest.approx(math.log(0.01 / 0.99))


def test_decoder_channels_are_dpts_reassemble_widths_and_the_first_its_fusion_width(small: Any) -> None:
    blocks = small.decoder.reassemble_blocks
    assert [b.project_to_out_channel.out_channels for b in blocks] == NARROW
    assert small.segmentation_head.head[0].in_channels == NARROW[0]


def _vit_state(backbone: str) -> dict[str, torch.Tensor]:
    import timm

    torch.manual_seed(1)
    return timm.create_model(backbone.removeprefix("tu-"), pretrained=False).state_dict()


@pytest.fixture(scope="module")
def small_vit_state() -> dict[str, torch.Tensor]:
    """A seeded ViT-S state dict in timm's naming, the local weights file of the loading tests (only read)."""
    return _vit_state(SMALL)


def test_local_weights_load_with_the_rgb_patch_embedding_adapted_to_extra_channels(
    small_vit_state: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    src = small_vit_state
    path = tmp_path / "dinov3_small.pth"
    torch.save(src, path)
    m: Any = build_model(_dpt(weights=str(path), decoder_channels=NARROW), FOUR)
    vit = m.encoder.model
    w, w_src = vit.patch_embed.proj.weight, src["patch_embed.proj.weight"]
    # timm's recipe (smp's for CNNs): RGB filters reused cyclically for the extra band, scaled by 3/4.
    torch.testing.assert_close(w[:, :3], w_src * 3 / 4)
    torch.testing.assert_close(w[:, 3], w_src[:, 0] * 3 / 4)
    torch.testing.assert_close(vit.blocks[5].mlp.fc1.weight, src["blocks.5.mlp.fc1.weight"])
    torch.testing.assert_close(vit.reg_token, src["reg_token"])


def test_metas_original_checkpoint_naming_loads(small_vit_state: dict[str, torch.Tensor], tmp_path: Path) -> None:
    """A DINOv3 .pth as Meta publishes it (storage_tokens, ls1.gamma, a mask token) goes through timm's own
    conversion."""
    src = small_vit_state
    meta = {
        k.replace("reg_token", "storage_tokens").replace("gamma_1", "ls1.gamma").replace("gamma_2", "ls2.gamma"): v
        for k, v in src.items()
    }
    meta["mask_token"] = torch.zeros(1, 384)
    assert "storage_tokens" in meta and not any("gamma_1" in k for k in meta)
    torch.save(meta, tmp_path / "dinov3_vits16_pretrain.pth")
    m: Any = build_model(
        _dpt(weights=str(tmp_path / "dinov3_vits16_pretrain.pth"), decoder_channels=NARROW), ChannelsConfig()
    )
    vit = m.encoder.model
    torch.testing.assert_close(vit.blocks[3].gamma_1, src["blocks.3.gamma_1"])
    torch.testing.assert_close(vit.patch_embed.proj.weight, src["patch_embed.proj.weight"])


def test_weights_that_do_not_fit_are_refused_naming_the_file(tmp_path: Path) -> None:
    tiny = tmp_path / "tiny.pth"
    torch.save(_vit_state("tu-vit_tiny_patch16_dinov3_qkvb"), tiny)  # 192 wide, not 384
    with pytest.raises(ModelConfigError, match=r"encoder weights .*tiny\.pth do not fit tu-vit_small_patch16_dinov3"):
        build_model(_dpt(weights=str(tiny), decoder_channels=NARROW), FOUR)
    junk = tmp_path / "junk.pth"
    torch.save({"fc.weight": torch.zeros(1)}, junk)  # a state dict of something else
    with pytest.raises(ModelConfigError, match=r"junk\.pth do not fit .*missing keys"):
        build_model(_dpt(weights=str(junk), decoder_channels=NARROW), FOUR)
    with pytest.raises(ModelConfigError, match=r"pretrained tag \['lvd1689m'\], null or an existing file; got 'lvd'"):
        build_model(_dpt(weights="lvd", decoder_channels=NARROW), FOUR)


def test_a_hub_tag_offline_fails_fast_saying_what_to_do(
    monkeypatch: pytest.MonkeyPatch, network_calls: list[str]
) -> None:
    """Fast: no connection tried and no hub download asked for; the time it takes is a bench figure
    (bench/fail_fast_bench.py)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    with pytest.raises(
        ModelConfigError,
        match=r"DINOv3 weights lvd1689m for tu-vit_small_patch16_dinov3 \(timm/vit_small_patch16_dinov3\.lvd1689m\) "
        r"are not in the local cache .*huggingface-cli download timm/vit_small_patch16_dinov3\.lvd1689m`.*local "
        r"weights file, or to null",
    ):
        build_model(_dpt(weights="lvd1689m", decoder_channels=NARROW), FOUR)
    assert network_calls == []


def test_a_packaged_dpt_loads_back_with_its_weights(small: Any, tmp_path: Path) -> None:
    torch.save(small.state_dict(), tmp_path / "weights.pth")
    packaged = PackagedModelConfig(
        architecture="dpt",
        backbone=SMALL,
        decoder_channels=NARROW,
        in_channels=4,
        channels=PackagedChannels(rgb=["R", "G", "B"], extra=FOUR.extra),
        tile_size=64,
    )
    model = load_model(tmp_path / "weights.pth", packaged, "cpu")
    assert not model.training
    for k, v in small.state_dict().items():
        assert torch.equal(model.state_dict()[k], v), k


@pytest.mark.slow  # ~12 s on an idle 2-core host: two tiny splits generated, 3 epochs of 2 steps
def test_a_dpt_trains_through_the_training_stage_and_loads_back(tmp_path: Path) -> None:
    """The fewest epochs the schedule allows (frozen backbone, warm-up, one cosine epoch), each validated and
    checkpointed; training reads the train and val stores and the statistics only, so no test split is made."""
    from rtscore import stages
    from rtscore.config import parse_pipeline_config
    from rtscore.stages.train import train_seed
    from tests.train.conftest import tiny_train_config

    data = tiny_train_config(max_epochs=3, steps_per_epoch=2).model_dump(mode="json")
    data["model"] = _dpt(decoder_channels=NARROW, head_prior=0.01).model_dump(mode="json")
    cfg = parse_pipeline_config(data)
    run = tmp_path / "run"
    for split in ("train", "val"):
        stages.generate_dataset(str(run), cfg, split)
    stages.normalization_stats(str(run), cfg)
    result = train_seed(str(run), cfg, 42).result
    assert result.epochs_run == 3 and math.isfinite(result.best_metric)
    model = load_model(Path(result.seed_dir) / "best_deployment.pth", cfg, "cpu")
    with torch.no_grad():
        assert model(torch.randn(1, 4, 64, 64)).shape == (1, 1, 64, 64)
