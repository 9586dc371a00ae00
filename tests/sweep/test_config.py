"""The sweep file: its base config resolved against the file, named variants and a grid expanded into named
variants, the baseline first, and every way of writing one that could not be judged refused naming the key and the
variant (a variant named twice, a name that cannot name a run directory, no variant to judge, unknown test variants,
bad seeds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rtscore.config.base import ConfigError, parse_config
from rtscore.sweep.config import BASELINE, DEFAULT_METRIC, SweepConfig, load_sweep_config


def _sweep(data: dict[str, Any]) -> SweepConfig:
    return parse_config(SweepConfig, {"base": "base.yaml", **data}, source="sweep.yaml")


def _refused(data: dict[str, Any], *needles: str) -> str:
    with pytest.raises(ConfigError) as err:
        _sweep(data)
    text = str(err.value)
    for needle in needles:
        assert needle in text, f"{needle!r} not in: {text}"
    return text


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# ----------------------------------------------------------------------------------------------- load_sweep_config
def test_the_base_resolves_against_the_sweep_files_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = _write(tmp_path / "configs" / "pipeline.yaml", "{}\n")
    path = _write(
        tmp_path / "configs" / "sweeps" / "loss.yaml",
        "base: ../pipeline.yaml\nvariants:\n  ignore: {loss.boundary_handling: ignore}\n",
    )
    monkeypatch.chdir(tmp_path)  # not the file's folder: the base resolves against the file, not the cwd
    sweep, resolved = load_sweep_config(Path("configs/sweeps/loss.yaml"))
    assert resolved == base.resolve() and resolved.is_absolute()
    assert sweep.name == "loss", "the name defaults to the file's stem"
    assert (sweep.metric, sweep.baseline, sweep.seeds, sweep.after_training) == (DEFAULT_METRIC, BASELINE, None, True)
    named = _write(path, path.read_text() + "name: boundary\n")
    assert load_sweep_config(named)[0].name == "boundary"


def test_a_missing_base_is_refused_naming_it(tmp_path: Path) -> None:
    path = _write(tmp_path / "sweeps" / "s.yaml", "base: ../nope.yaml\nvariants:\n  a: {loss.focal_gamma: 1.0}\n")
    with pytest.raises(ConfigError, match=r"invalid sweep .*s\.yaml: base: \.\./nope\.yaml does not exist"):
        load_sweep_config(path)


def test_a_missing_sweep_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found: .*missing.yaml"):
        load_sweep_config(tmp_path / "missing.yaml")


def test_an_unknown_key_of_the_sweep_file_is_refused_naming_it(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "{}\n")
    path = _write(tmp_path / "s.yaml", "base: base.yaml\nvariant:\n  a: {loss.focal_gamma: 1.0}\n")
    with pytest.raises(ConfigError, match="variant: unknown key"):
        load_sweep_config(path)


def test_a_variant_named_twice_in_the_file_is_refused_naming_it(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "{}\n")
    path = _write(
        tmp_path / "s.yaml",
        "base: base.yaml\nvariants:\n  ignore: {loss.boundary_handling: ignore}\n  gamma: {loss.focal_gamma: 1.0}\n"
        "  ignore: {loss.boundary_handling: soft_labels}\n",
    )
    with pytest.raises(
        ConfigError, match=r"s\.yaml, line 5: key 'ignore' is given twice in one mapping \(first on line 3\)"
    ):
        load_sweep_config(path)


def test_an_override_key_given_twice_in_a_variant_is_refused(tmp_path: Path) -> None:
    _write(tmp_path / "base.yaml", "{}\n")
    path = _write(
        tmp_path / "s.yaml",
        "base: base.yaml\nvariants:\n  a:\n    loss.focal_gamma: 1.0\n    loss.focal_gamma: 3.0\n",
    )
    with pytest.raises(ConfigError, match="key 'loss.focal_gamma' is given twice"):
        load_sweep_config(path)


# ----------------------------------------------------------------------------------------------- variants and grid
def test_the_baseline_comes_first_and_is_the_base_unchanged_unless_listed() -> None:
    sweep = _sweep({"variants": {"ignore": {"loss.boundary_handling": "ignore"}}})
    assert sweep.all_variants() == {"baseline": {}, "ignore": {"loss.boundary_handling": "ignore"}}
    listed = _sweep({"variants": {"a": {"loss.focal_gamma": 1.0}, "baseline": {"loss.focal_gamma": 2.0}}})
    assert list(listed.all_variants().items()) == [
        ("baseline", {"loss.focal_gamma": 2.0}),
        ("a", {"loss.focal_gamma": 1.0}),
    ]
    other = _sweep({"baseline": "none", "variants": {"ignore": {"loss.boundary_handling": "ignore"}, "none": {}}})
    assert list(other.all_variants()) == ["none", "ignore"], "a listed variant may be the baseline"


def test_a_grid_is_one_variant_per_combination_named_by_short_keys() -> None:
    sweep = _sweep(
        {
            "variants": {"ignore": {"loss.boundary_handling": "ignore"}},
            "grid": {"loss.focal_gamma": [1.0, 3.0], "loss.name": ["focal", "compound"]},
        }
    )
    assert sweep.grid_variants() == {
        "focal_gamma=1.0,name=focal": {"loss.focal_gamma": 1.0, "loss.name": "focal"},
        "focal_gamma=1.0,name=compound": {"loss.focal_gamma": 1.0, "loss.name": "compound"},
        "focal_gamma=3.0,name=focal": {"loss.focal_gamma": 3.0, "loss.name": "focal"},
        "focal_gamma=3.0,name=compound": {"loss.focal_gamma": 3.0, "loss.name": "compound"},
    }
    assert list(sweep.all_variants()) == ["baseline", "ignore", *sweep.grid_variants()]
    assert _sweep({"variants": {"a": {"loss.focal_gamma": 1.0}}}).grid_variants() == {}


def test_a_grid_name_colliding_with_a_listed_variant_is_refused() -> None:
    _refused(
        {"variants": {"focal_gamma=1.0": {"loss.name": "compound"}}, "grid": {"loss.focal_gamma": [1.0, 3.0]}},
        "variant focal_gamma=1.0 is named twice (in variants and by the grid)",
    )


def test_two_grid_values_giving_one_name_are_refused() -> None:
    """True and "True" (or "a b" and "ab") would give one variant name: one of them silently lost."""
    _refused({"grid": {"loss.x": [True, "True"]}}, "grid", "x=True", "twice")
    _refused({"grid": {"loss.x": ["a b", "ab"]}}, "grid", "x=ab", "twice")


def test_a_grid_value_that_cannot_name_a_run_directory_is_refused() -> None:
    """A variant's name is its run directory's: a grid value with a slash would nest one variant in another."""
    _refused({"grid": {"data.generation.train": ["gen/a.yaml", "gen/b.yaml"]}}, "grid", "train=gen/a.yaml")


def test_a_grid_key_without_values_is_refused() -> None:
    _refused({"grid": {"loss.focal_gamma": []}}, "grid key loss.focal_gamma has no values")


@pytest.mark.parametrize("name", ["a/b", "..", ".", "-a", "_a", "a b", "", "ü"])
def test_a_variant_name_that_cannot_name_a_run_directory_is_refused(name: str) -> None:
    _refused({"variants": {name: {"loss.focal_gamma": 1.0}}}, f"variant name {name!r}", "run directory")


@pytest.mark.parametrize("name", ["ignore", "gamma=1.0", "rgb+ndvi", "a.b", "A_1-x,y"])
def test_a_variant_name_of_the_allowed_characters_is_taken(name: str) -> None:
    assert name in _sweep({"variants": {name: {"loss.focal_gamma": 1.0}}}).all_variants()


def test_an_override_key_that_is_not_a_key_path_is_refused_naming_the_variant() -> None:
    _refused({"variants": {"ignore": {"loss boundary": "ignore"}}}, "variant ignore", "'loss boundary'")
    _refused({"grid": {"loss..gamma": [1.0]}}, "grid", "'loss..gamma'")


def test_a_sweep_without_variants_is_refused() -> None:
    _refused({}, "no variants")
    _refused({"variants": {}, "grid": {}}, "no variants")


def test_a_sweep_of_the_baseline_alone_is_refused() -> None:
    """Nothing to judge: only the baseline, listed or named."""
    _refused({"variants": {"baseline": {"loss.focal_gamma": 1.0}}}, "no variants")
    _refused({"baseline": "none", "variants": {"none": {}}}, "no variants")


def test_a_baseline_that_names_no_variant_is_refused() -> None:
    """A misspelt baseline would silently become another, unchanged, variant judged against itself."""
    _refused(
        {"baseline": "nnone", "variants": {"none": {}, "ignore": {"loss.boundary_handling": "ignore"}}},
        "baseline: nnone is not a variant",
        "none, ignore",
    )


def test_test_variants_naming_an_unknown_variant_are_refused() -> None:
    _refused(
        {"variants": {"ignore": {"loss.boundary_handling": "ignore"}}, "test_variants": ["ignroe"]},
        "test_variants names ignroe, which is not a variant",
    )
    ok = _sweep({"variants": {"ignore": {"loss.boundary_handling": "ignore"}}, "test_variants": ["baseline", "ignore"]})
    assert ok.test_variants == ["baseline", "ignore"]


@pytest.mark.parametrize("seeds", [[], [1, 1], [-1, 2]])
def test_bad_seeds_are_refused(seeds: list[int]) -> None:
    _refused({"variants": {"a": {"loss.focal_gamma": 1.0}}, "seeds": seeds}, "seeds:", "distinct non-negative")


def test_seeds_confidence_and_margin_are_taken() -> None:
    sweep = _sweep({"variants": {"a": {"loss.focal_gamma": 1.0}}, "seeds": [0, 7], "confidence": 0.9, "margin": 0.0})
    assert (sweep.seeds, sweep.confidence, sweep.margin) == ([0, 7], 0.9, 0.0)
    _refused({"variants": {"a": {}}, "confidence": 1.0}, "confidence")
    _refused({"variants": {"a": {}}, "margin": -0.1}, "margin")
    _refused({"variants": {"a": {}}, "until_decided": {"max_seeds": 1}}, "until_decided.max_seeds")


def test_the_example_sweeps_load(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2] / "configs" / "sweeps"
    files = sorted(root.glob("*.yaml"))
    assert files, "configs/sweeps holds the example sweeps"
    for path in files:
        sweep, base = load_sweep_config(path)
        assert base.is_file() and len(sweep.all_variants()) >= 2, path
        assert yaml.safe_load(path.read_text())["base"] == sweep.base
