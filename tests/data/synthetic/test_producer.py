from __future__ import annotations

from pathlib import Path

import numpy as np

from rtscore.config.generation import GenerationConfig
from rtscore.data.store.format import read_store_attrs
from rtscore.data.store.reader import ZarrTileStore
from rtscore.data.synthetic.producer import generate_synthetic


def test_generation_metadata_and_counts(gen_config: GenerationConfig, tmp_path: Path) -> None:
    out = tmp_path / "train.zarr"
    attrs = generate_synthetic(gen_config, out)
    stored = read_store_attrs(out)
    assert stored == attrs  # read back typed as written
    assert attrs.counts.n_tiles == 12 and attrs.counts.n_full_nodata == 1
    assert attrs.counts.n_positive == 6 and attrs.counts.regions == ["alpha tundra", "beta tundra"]
    assert attrs.config["seed"] == 7 and len(attrs.config_hash) == 64
    assert set(attrs.versions) == {"rtscore", "zarr", "numpy"}
    assert 0 < attrs.prevalence.exact < 0.5
    assert attrs.channel_names == ["R", "G", "B", "ndvi"] and attrs.mask_types == ["exact", "noisy"]
    store = ZarrTileStore(out)
    meta = store.metadata
    assert meta.full_nodata.sum() == 1 and len(set(meta.tile_id.tolist())) == 12


def test_workers_do_not_change_the_data(gen_config: GenerationConfig, tmp_path: Path) -> None:
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    generate_synthetic(gen_config, a, num_workers=1)
    generate_synthetic(gen_config, b, num_workers=2)
    sa, sb = ZarrTileStore(a), ZarrTileStore(b)
    for i in range(len(sa)):
        np.testing.assert_array_equal(sa[i].rgb, sb[i].rgb)
        np.testing.assert_array_equal(sa[i].label, sb[i].label)
        np.testing.assert_array_equal(sa[i].extra, sb[i].extra)


def test_rotation_expansion_stores_four_rotations(gen_config: GenerationConfig, tmp_path: Path) -> None:
    plain = tmp_path / "plain.zarr"
    generate_synthetic(gen_config, plain)
    rot_cfg = gen_config.model_copy(deep=True)
    rot_cfg.processing.augmentation.rotations = True
    rotated = tmp_path / "rot.zarr"
    attrs = generate_synthetic(rot_cfg, rotated)
    assert attrs.counts.n_tiles == 4 * 12 and attrs.counts.n_positive == 4 * 6
    p, r = ZarrTileStore(plain), ZarrTileStore(rotated)
    for src in (0, 5):
        for k in range(4):
            t = r[4 * src + k]
            assert t.tile_id == p[src].tile_id + ("" if k == 0 else f"_r{90 * k}")
            np.testing.assert_array_equal(t.rgb, np.rot90(p[src].rgb, k, axes=(-2, -1)))
            np.testing.assert_array_equal(t.label, np.rot90(p[src].label, k))


def test_noisy_variant_differs_but_keeps_ignore(gen_config: GenerationConfig, tmp_path: Path) -> None:
    cfg = gen_config.model_copy(deep=True)
    cfg.synthetic.noisy_labels.boundary_jitter_px = 3.0
    out = tmp_path / "train.zarr"
    generate_synthetic(cfg, out)
    exact, noisy = ZarrTileStore(out, "exact"), ZarrTileStore(out, "noisy")
    differs = 0
    for i in range(len(exact)):
        e, n = exact[i].label, noisy[i].label
        assert (n[e == 255] == 255).all()
        differs += int((e != n).any())
    assert differs > 0
