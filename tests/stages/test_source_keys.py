"""A GeoTIFF data root is an input of generation: what it holds keys the generate stage (issue 21, case 2).

Re-tiling or editing the root (a file added, removed or rewritten; local or gs://) re-runs generation and,
where the tiles changed, everything after it; an unchanged root stays cached.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import numpy as np
import pytest

from rtscore.config import parse_pipeline_config
from rtscore.config.pipeline import PipelineConfig
from rtscore.stages import cache_key
from tests.flows.configs import write_config
from tests.helpers import derived_split_root, executed_stages, geotiff_pipeline_config

SPLITS = ("train", "val", "test")


def keys(run: str, cfg: PipelineConfig) -> list[str]:
    return [cache_key("generate-dataset", run, cfg, {"split": s}) for s in SPLITS]


def first_rgb(root: Path) -> Path:
    return sorted((root / "PLANET-RGB").glob("*.tif"))[0]


def rewrite_pixels(path: Path) -> None:
    import rasterio

    with rasterio.open(path, "r+") as f:  # the colour bands inverted; the alpha band (valid pixels) kept
        data = f.read()
        data[:3] = 255 - data[:3]
        f.write(np.ascontiguousarray(data))


def test_every_change_of_a_local_root_changes_the_generate_keys_and_nothing_else_does(tmp_path: Path) -> None:
    root = derived_split_root(tmp_path / "tifs")
    cfg = parse_pipeline_config(geotiff_pipeline_config(str(root)))
    run = str(tmp_path / "run")
    seen = {tuple(keys(run, cfg))}
    assert tuple(keys(run, cfg)) in seen, "an unchanged root keeps its keys"

    def changed(what: str) -> None:
        now = tuple(keys(run, cfg))
        assert all(k not in {s[i] for s in seen} for i, k in enumerate(now)), what
        seen.add(now)

    rgb = first_rgb(root)
    extra = root / "PLANET-RGB" / "copy.tif"
    extra.write_bytes(rgb.read_bytes())
    changed("a file added")
    (root / "EXTRA" / rgb.name).unlink()
    changed("a file removed")
    rewrite_pixels(rgb)
    changed("a file rewritten")


def test_a_gs_root_keys_generation_by_its_objects_generations(
    tmp_path: Path, gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    from tests.conftest import GCS_TEST_BUCKET

    root = derived_split_root(tmp_path / "tifs")
    prefix = f"{uuid.uuid4().hex[:8]}/tifs"
    bucket = storage.Client(project="test", credentials=AnonymousCredentials()).bucket(GCS_TEST_BUCKET)
    for f in root.rglob("*"):
        if f.is_file():
            bucket.blob(f"{prefix}/{f.relative_to(root).as_posix()}").upload_from_filename(str(f))
    cfg = parse_pipeline_config(geotiff_pipeline_config(f"gs://{GCS_TEST_BUCKET}/{prefix}"))
    run = str(tmp_path / "run")
    first = keys(run, cfg)
    assert keys(run, cfg) == first
    rgb = first_rgb(root).relative_to(root).as_posix()
    bucket.blob(f"{prefix}/PLANET-RGB/added.tif").upload_from_filename(str(first_rgb(root)))
    second = keys(run, cfg)
    bucket.blob(f"{prefix}/{rgb}").delete()
    third = keys(run, cfg)
    bucket.blob(f"{prefix}/PLANET-RGB/added.tif").upload_from_filename(str(first_rgb(root)))  # rewritten
    fourth = keys(run, cfg)
    for a, b, c, d in zip(first, second, third, fourth, strict=True):
        assert len({a, b, c, d}) == 4


@pytest.mark.slow
def test_rts_data_regenerates_after_a_root_changes_and_keeps_what_did_not(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flows.data import data_pipeline
    from flows.params import DataParams

    root = derived_split_root(tmp_path / "tifs")
    config = write_config(tmp_path / "pipeline.yaml", geotiff_pipeline_config(str(root)))
    params = DataParams(config=str(config), run_dir=str(tmp_path / "run"))
    data_pipeline(params)
    seen = executed_stages(monkeypatch)
    data_pipeline(params)
    assert [s for s in seen if s != "config"] == [], "an unchanged root stays cached"

    # Rewritten with the same bytes: generation runs again, finds the same tiles; nothing after it re-runs.
    rgb = first_rgb(root)
    rgb.write_bytes(rgb.read_bytes())
    seen.clear()
    data_pipeline(params)
    assert set(seen) - {"config"} == {"generate-dataset"}

    # Re-tiled: the tiles' pixels change. Generation and everything after it run again.
    for tif in (root / "PLANET-RGB").glob("*.tif"):
        rewrite_pixels(tif)
    seen.clear()
    data_pipeline(params)
    assert {"generate-dataset", "normalization-stats", "validate-data"} <= set(seen)
