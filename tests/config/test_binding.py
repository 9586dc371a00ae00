"""The input binding: one name -> band definition; configs, stores and stats that disagree are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from rtscore.config import ConfigError, parse_pipeline_config
from rtscore.config.binding import ExtraChannel, InputBinding
from rtscore.config.generation import GenerationConfig
from rtscore.data.store.attrs import StoreAttrs
from tests.helpers import store_attrs_doc, tiny_pipeline_config


def geotiff_pipeline(gen_extra: list[object], channels_extra: list[dict[str, object]]) -> dict[str, object]:
    base = tiny_pipeline_config()
    gen = {
        split: {
            "split": split,
            "tile_size": 64,
            "source": "geotiff",
            "geotiff": {"data_root": "/data/root", "extra_channels": gen_extra},
        }
        for split in ("train", "val", "test")
    }
    return {**base, "data": {**base["data"], "generation": gen}, "channels": {"extra": channels_extra}}


def test_one_binding_in_generation_and_channels_is_accepted() -> None:
    cfg = parse_pipeline_config(geotiff_pipeline([{"name": "nbr", "band": 1}], [{"name": "nbr", "band": 1}]))
    assert cfg.channels.binding.bands_by_name() == {"nbr": 1}
    assert cfg.data.generation.train is not None
    assert cfg.data.generation.train.input_binding == cfg.channels.binding


def test_a_name_bound_to_two_bands_is_refused() -> None:
    """The issue's case: ingestion would store band 0 as nbr while predict and drift read band 1."""
    with pytest.raises(ConfigError) as err:
        parse_pipeline_config(geotiff_pipeline([{"name": "nbr", "band": 0}], [{"name": "nbr", "band": 1}]))
    text = str(err.value)
    assert "channels.extra and data.generation.train.geotiff.extra_channels bind" in text
    assert "'nbr' is band 0 there, band 1 here" in text


def test_a_name_bound_to_no_band_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"geotiff.extra_channels.*'nbr' is bound to no band: write \{name: nbr"):
        parse_pipeline_config(geotiff_pipeline(["nbr"], [{"name": "nbr", "band": 1}]))
    with pytest.raises(ConfigError, match=r"channels.extra names \['nbr'\] are not generated"):
        parse_pipeline_config(geotiff_pipeline([{"name": "ndvi", "band": 0}], [{"name": "nbr", "band": 1}]))


def test_synthetic_channels_bind_by_position() -> None:
    """Synthetic EXTRA channel i is band i of the EXTRA files synth-geotiff writes; channels.extra must agree."""
    data = tiny_pipeline_config()
    for split in ("train", "val", "test"):
        data["data"]["generation"][split]["synthetic"]["extra_channels"] = ["ndvi", "slope"]
    parse_pipeline_config({**data, "channels": {"extra": [{"name": "slope", "band": 1}]}})
    with pytest.raises(ConfigError, match=r"synthetic.extra_channels \(by position\).*'slope' is band 1 there"):
        parse_pipeline_config({**data, "channels": {"extra": [{"name": "slope", "band": 0}]}})


def test_one_band_feeds_one_channel() -> None:
    with pytest.raises(ConfigError, match=r"bands bound twice: \{2: \['a', 'b'\]\}"):
        parse_pipeline_config(
            geotiff_pipeline([{"name": "a", "band": 2}, {"name": "b", "band": 2}], [{"name": "a", "band": 2}])
        )
    with pytest.raises(ValueError, match="bands bound twice"):
        InputBinding.of_extra([ExtraChannel(name="a", band=0), ExtraChannel(name="b", band=0)])


def test_store_written_with_another_binding_is_refused_by_the_stats(tmp_path: Path) -> None:
    """A store generated elsewhere (data.skip_generation) with nbr = band 0 cannot feed a config reading band 1."""
    from rtscore.data.normalization.compute import compute_normalization_stats
    from rtscore.data.normalization.stats import NormalizationStatsError
    from tests.helpers import write_test_store

    store = tmp_path / "train.zarr"
    write_test_store(store, 6, extra=2)  # extra channels e0, e1 (positional: bands 0, 1)
    stats = compute_normalization_stats(store, extra_channels=[ExtraChannel(name="e1", band=1)])
    assert stats.channel_names == ["R", "G", "B", "e1"] and stats.extra_bands == [1]
    with pytest.raises(NormalizationStatsError, match=r"another EXTRA band binding.*'e1' is band 1 there, band 0"):
        compute_normalization_stats(store, extra_channels=[ExtraChannel(name="e1", band=0)])


def test_generation_config_binding_round_trips() -> None:
    gen = GenerationConfig.model_validate(
        {
            "split": "val",
            "tile_size": 64,
            "source": "geotiff",
            "geotiff": {"data_root": "r", "extra_channels": [{"name": "nbr", "band": 3}, {"name": "ndvi", "band": 0}]},
        }
    )
    binding = gen.input_binding
    assert binding.names == ["R", "G", "B", "nbr", "ndvi"] and binding.extra_bands == [3, 0]
    recorded = StoreAttrs.model_validate(store_attrs_doc(input_binding=binding.model_dump(mode="json")))
    assert recorded.binding() == binding
    unrecorded = StoreAttrs.model_validate(store_attrs_doc(extra_channel_names=["x", "y"]))
    assert unrecorded.binding().bands_by_name() == {"x": 0, "y": 1}


def test_additional_root_written_with_another_binding_is_refused(tmp_path: Path) -> None:
    """A joined train store (data.additional_roots) must hold the configured channels from the same bands."""
    from rtscore.data.loading.additional_roots import open_additional_roots
    from rtscore.data.store.format import TileStoreError
    from tests.helpers import write_test_store

    write_test_store(tmp_path / "extra.zarr", 4, extra=2)  # e0 = band 0, e1 = band 1
    base = tiny_pipeline_config(tile=32, extra=False)
    data = {**base, "data": {**base["data"], "generation": {}, "additional_roots": [str(tmp_path / "extra.zarr")]}}
    ok = parse_pipeline_config({**data, "channels": {"extra": [{"name": "e1", "band": 1}]}})
    assert len(open_additional_roots(ok, tmp_path)) == 1
    bad = parse_pipeline_config({**data, "channels": {"extra": [{"name": "e1", "band": 0}]}})
    with pytest.raises(TileStoreError, match=r"data.additional_roots\[0\].*'e1' is band 1 there, band 0 here"):
        open_additional_roots(bad, tmp_path)
