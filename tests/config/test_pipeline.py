"""The pipeline config (rtscore/config/pipeline.py): metric and ratio keys validated at load time with their key
path, and sampling keys that could not act refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rtscore.config import ConfigError, parse_pipeline_config
from rtscore.config.pipeline import load_pipeline_config

ROOT = Path(__file__).resolve().parents[2]


def _refused(data: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        parse_pipeline_config(data)


@pytest.mark.parametrize(
    ("ratios", "pattern"),
    [
        ([], r"metrics\.ratios: needs at least one prevalence 1:N"),
        ([0, -5], r"metrics\.ratios: expected distinct ratios N >= 1 .*got \[0, -5\]"),
        ([200, 500, 200], r"metrics\.ratios: expected distinct ratios"),
        ([200, 0], r"metrics\.ratios: expected distinct ratios"),
        ([200.5], r"metrics\.ratios\[0\]: .*valid integer"),
    ],
)
def test_metric_ratios_are_checked_when_the_config_loads(ratios: list[Any], pattern: str) -> None:
    """Before: [] trained with a nan metric and no best checkpoint; [0, -5] failed after a whole epoch."""
    _refused({"metrics": {"ratios": ratios}}, pattern)


def test_valid_ratios_load_and_define_the_early_stopping_geomean() -> None:
    cfg = parse_pipeline_config({"metrics": {"ratios": [1, 200]}})
    assert cfg.metrics.ratios == [1, 200]
    desc = type(cfg.training.early_stopping).model_fields["metric"].description or ""
    assert "metrics.ratios" in desc, "the metric's definition follows the configured ratios"


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({"metrics": {"object_iou_thresholds": []}}, r"metrics\.object_iou_thresholds: expected a non-empty list"),
        ({"metrics": {"object_iou_thresholds": [0.3, 0.0]}}, r"metrics\.object_iou_thresholds: .*in \(0, 1\]"),
        ({"metrics": {"object_iou_thresholds": [0.3, 1.5]}}, r"metrics\.object_iou_thresholds"),
        ({"metrics": {"object_iou_thresholds": [0.3, 0.3]}}, r"metrics\.object_iou_thresholds: .*distinct"),
        ({"metrics": {"reporting_threshold": 1.0}}, r"metrics\.reporting_threshold"),
        ({"metrics": {"pr_bins": 8}}, r"metrics\.pr_bins"),
        ({"evaluation": {"size_bins_m2": [0.0]}}, r"evaluation\.size_bins_m2: expected at least 2"),
        ({"evaluation": {"size_bins_m2": [0.0, 100.0, 50.0]}}, r"evaluation\.size_bins_m2: .*increasing"),
        ({"evaluation": {"size_bins_m2": [-1.0, 100.0]}}, r"evaluation\.size_bins_m2: .*non-negative"),
        ({"calibration": {"ratio": 0}}, r"calibration\.ratio"),
        ({"calibration": {"temperature_bounds": [3.0, 1.0]}}, r"calibration\.temperature_bounds: expected 0 < low"),
        ({"calibration": {"temperature_bounds": [0.0, 1.0]}}, r"calibration\.temperature_bounds"),
    ],
)
def test_every_metric_key_is_checked_with_its_path(data: dict[str, Any], pattern: str) -> None:
    _refused(data, pattern)


def test_positive_fraction_without_a_balanced_phase_is_refused() -> None:
    no_balanced_phase = [{"start_epoch": 1, "end_epoch": None, "neg_per_pos": 5}]
    _refused(
        {"sampling": {"positive_fraction": 0.3, "curriculum_schedule": no_balanced_phase}},
        r"sampling\.positive_fraction \(0\.3\) sets the batches of the balanced phase .* no such stage",
    )
    # The guide's 0.5 is the curriculum's own 1:1 share: with or without a 1:1 stage it changes nothing.
    assert parse_pipeline_config({"sampling": {"curriculum_schedule": no_balanced_phase}})
    assert parse_pipeline_config({"sampling": {"positive_fraction": 0.3}}).sampling.positive_fraction == 0.3


def test_min_blob_size_px_is_refused_naming_the_ground_area_key_and_the_conversion() -> None:
    """Issue 23 (4): object sizes are ground m²; a config written with the pixel key is told what to write."""
    with pytest.raises(ConfigError) as err:
        parse_pipeline_config({"metrics": {"min_blob_size_px": 16}})
    msg = str(err.value)
    assert "metrics: min_blob_size_px was replaced by min_object_area_m2" in msg
    assert "metrics.min_object_area_m2 in m²: 16 px x the ground area of one pixel of your tiles" in msg
    assert "16 px at 4.77 m = 364 m², at 300 m = 1,440,000 m²" in msg
    assert "extra" not in msg.lower()  # not pydantic's bare "extra inputs are not permitted"
    m = parse_pipeline_config({"metrics": {"min_object_area_m2": 90_000}}).metrics  # a YAML integer is an area too
    assert m.min_object_area_m2 == 90_000.0
    _refused({"metrics": {"min_object_area_m2": -1.0}}, r"metrics\.min_object_area_m2")
    _refused({"metrics": {"min_object_area_m2": float("inf")}}, r"metrics\.min_object_area_m2")


def test_object_metrics_follow_the_guide_by_default_and_the_old_rules_are_opt_in() -> None:
    """Issue 35 (4): guide §6.2 counts every connected component and matches each prediction to its own best GT
    object; the size filter and the best-still-unmatched matching are opt-in. `rts map`'s speck filter is its own
    key (package.min_object_area_m2), still 350 m² by default."""
    cfg = parse_pipeline_config({})
    assert (cfg.metrics.min_object_area_m2, cfg.metrics.object_matching) == (None, "guide")
    assert cfg.package.min_object_area_m2 == 350.0
    old = parse_pipeline_config({"metrics": {"min_object_area_m2": 350.0, "object_matching": "best_unmatched"}})
    assert (old.metrics.min_object_area_m2, old.metrics.object_matching) == (350.0, "best_unmatched")
    _refused({"metrics": {"object_matching": "hungarian"}}, r"metrics\.object_matching")
    _refused({"package": {"min_object_area_m2": -1.0}}, r"package\.min_object_area_m2")


def _dpt(model: dict[str, Any] | None = None, tile: int = 64) -> dict[str, Any]:
    base = {"architecture": "dpt", "backbone": "tu-vit_small_patch16_dinov3", "encoder_weights": None}
    return {"data": {"tile_size": tile}, "model": base | (model or {})}


def test_a_dpt_config_loads() -> None:
    cfg = parse_pipeline_config(_dpt({"encoder_weights": "lvd1689m", "decoder_channels": [32, 32, 64, 64]}))
    assert (cfg.model.architecture, cfg.model.encoder_weights, cfg.data.tile_size) == ("dpt", "lvd1689m", 64)
    assert parse_pipeline_config(_dpt({"backbone": "tu-vit_large_patch16_dinov3", "encoder_weights": "sat493m"}))


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        # a ViT's 16-px patches, and DPT halves the patch grid once: 32 | tile size
        (
            _dpt(tile=500),
            r"data\.tile_size \(500\) must be a multiple of 32 for model\.architecture dpt .*nearest "
            r"valid sizes: \[480, 512\]",
        ),
        (_dpt(tile=48), r"data\.tile_size \(48\) must be a multiple of 32 .*\[32, 64\]"),
        (
            _dpt({"backbone": "efficientnet-b5"}),
            r"model: model\.backbone 'efficientnet-b5' is not an encoder "
            r"model\.architecture dpt takes: a DINOv3 ViT from timm, one of \['tu-vit_small_patch16_dinov3', ",
        ),
        (
            _dpt({"backbone": "tu-vit_small_patch16_dinov3.lvd1689m"}),
            r"the pretrained tag goes in "
            r"model\.encoder_weights \('tu-vit_small_patch16_dinov3' with encoder_weights 'lvd1689m'\)",
        ),
        (
            _dpt({"encoder_weights": "imagenet"}),
            r"model\.encoder_weights 'imagenet': tu-vit_small_patch16_dinov3 has "
            r"no ImageNet weights; set it to a pretrained tag of the backbone \['lvd1689m'\]",
        ),
        (_dpt({"decoder_channels": [16, 16, 16, 16, 16]}), r"model\.decoder_channels for dpt: 4 positive widths"),
        (
            {"model": {"architecture": "unet", "backbone": "tu-vit_small_patch16_dinov3"}},
            r"model\.backbone 'tu-vit_small_patch16_dinov3' is a ViT, which only model\.architecture dpt takes",
        ),
    ],
)
def test_dpt_rules_are_checked_when_the_config_loads(data: dict[str, Any], pattern: str) -> None:
    """Before: the model failed at its first forward (a 48-px tile) or at build (an unknown backbone)."""
    _refused(data, pattern)


@pytest.mark.parametrize(
    ("override", "asks"),
    [
        ({"deployment.scales": [1.0, 0.5]}, r"deployment.scales is \[1.0, 0.5\]"),
        ({"calibration.allow_multiscale_deployment": True}, "calibration.allow_multiscale_deployment is true"),
    ],
)
def test_shipping_half_scale_from_a_geotiff_root_is_refused_when_the_config_loads(
    override: dict[str, Any], asks: str
) -> None:
    """Guide §8.3: the 0.5x input is each tile's 2x field of view, which only the synthetic source builds (its
    context stores); a GeoTIFF run asking to ship 0.5x fails at load, not at the logit cache after training."""
    path = ROOT / "configs" / "quickstart_geotiff.yaml"
    cfg = load_pipeline_config(path)
    assert 0.5 in cfg.calibration.scale_candidates and cfg.calibration.scale_gate  # the gate may stay on
    with pytest.raises(ConfigError, match=asks + r".*data.generation.val and data.generation.test read a GeoTIFF"):
        load_pipeline_config(path, override)
    synthetic = load_pipeline_config(
        ROOT / "configs" / "baseline.yaml", {**override, "calibration.scale_candidates": [1.0, 0.5]}
    )
    assert synthetic.deployment.scales == override.get("deployment.scales", [1.0])
