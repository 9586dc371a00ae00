"""One error hierarchy: every exception rtscore defines is a PipelineError (the CLI prints those as one line),
except the internal control-flow signals listed in INTERNAL; user errors name the field, file or tile."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import rtscore
from rtscore.errors import PipelineError

# Exceptions that never reach a user: each is caught inside rtscore and means "try again" or "take the other
# branch". Keep this short; anything a user can act on derives from PipelineError instead.
INTERNAL: dict[str, str] = {
    "rtscore.storage.gcs.ManifestConflict": "retry signal of the manifest's read-modify-write loop, caught by "
    "the storage layer (HTTP 412 under concurrent writers)",
    "rtscore.inference.stream._Stopped": "stop signal between the window stream's threads (another stage failed), "
    "caught inside the stream; the stage's own error is what the caller sees",
}


def _walk(paths: list[str], prefix: str) -> list[str]:
    """Module names under ``paths``: pkgutil for modules and regular packages, plus folders of modules without
    an ``__init__.py`` (namespace packages), which pkgutil does not descend into."""
    names: list[str] = []
    for info in pkgutil.iter_modules(paths, prefix):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        names.append(info.name)
        if info.ispkg:
            pkg_dir = Path(info.module_finder.path) / info.name.rsplit(".", 1)[-1]  # type: ignore[union-attr]
            names += _walk([str(pkg_dir)], f"{info.name}.")
    for base in paths:
        for sub in sorted(Path(base).iterdir()):
            is_namespace = sub.is_dir() and not (sub / "__init__.py").exists()
            if is_namespace and sub.name.isidentifier() and not sub.name.startswith("_") and any(sub.glob("*.py")):
                names.append(f"{prefix}{sub.name}")
                names += _walk([str(sub)], f"{prefix}{sub.name}.")
    return names


MODULES = sorted(set(_walk(list(rtscore.__path__), "rtscore.")))


def _exceptions_of(module_name: str) -> list[type[BaseException]]:
    """Exception classes defined (not merely imported) in the module; warnings are not errors."""
    mod = importlib.import_module(module_name)
    return [
        obj
        for obj in vars(mod).values()
        if isinstance(obj, type)
        and issubclass(obj, Exception)
        and not issubclass(obj, Warning)
        and obj.__module__ == module_name
    ]


def test_walk_finds_regular_and_namespace_packages() -> None:
    """rtscore.data is a namespace package today and may get an __init__.py: its modules are found either way."""
    for name in ("rtscore.errors", "rtscore.config.base", "rtscore.data.store.reader", "rtscore.data.synthetic"):
        assert name in MODULES
    assert "rtscore.data" in MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_exceptions_derive_from_pipeline_error(module_name: str) -> None:
    """A module that cannot be imported fails here too: its exceptions could not be checked."""
    for cls in _exceptions_of(module_name):
        qualname = f"{module_name}.{cls.__qualname__}"
        if qualname in INTERNAL:
            continue
        assert issubclass(cls, PipelineError), (
            f"{qualname} derives from {[b.__name__ for b in cls.__mro__[1:]]}, not PipelineError: make it "
            "a PipelineError (keep ValueError as a mixin where callers catch it), or add it to INTERNAL with a reason"
        )


@pytest.mark.parametrize("qualname", sorted(INTERNAL))
def test_internal_exceptions_exist_and_stay_internal(qualname: str) -> None:
    module_name, _, name = qualname.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    assert issubclass(cls, Exception) and not issubclass(cls, PipelineError)
    assert INTERNAL[qualname].strip()


def test_value_error_mixins_kept() -> None:
    """Callers and pydantic validators catch these as ValueError: the mixin stays."""
    from rtscore.config.base import ConfigError
    from rtscore.data.errors import DataValidationError
    from rtscore.data.normalization.stats import NormalizationStatsError

    for cls in (ConfigError, NormalizationStatsError, DataValidationError):
        assert issubclass(cls, PipelineError) and issubclass(cls, ValueError)


# --------------------------------------------------------------------------- representative user errors
def _unknown_config_key() -> None:
    from rtscore.config.base import parse_config
    from rtscore.config.deployment import DeploymentConfig

    parse_config(DeploymentConfig, {"thresholdd": 0.5}, source="deployment_config.yaml")


def _pipeline_config_unknown_key() -> None:
    from rtscore.config.pipeline import parse_pipeline_config

    parse_pipeline_config({"trainingg": {}})


def _missing_config_file(tmp: Path) -> None:
    from rtscore.config.base import load_config
    from rtscore.config.deployment import DeploymentConfig

    load_config(DeploymentConfig, tmp / "no_such_config.yaml")


def _missing_tile_store(tmp: Path) -> None:
    from rtscore.data.store.reader import ZarrTileStore

    ZarrTileStore(tmp / "no_such_store.zarr")


def _missing_checkpoint(tmp: Path) -> None:
    from rtscore.models import load_checkpoint

    load_checkpoint(tmp / "no_such_checkpoint.pth")


def _missing_stats(tmp: Path) -> None:
    from rtscore.data.normalization.stats import load_normalization_stats

    load_normalization_stats(tmp / "no_such_stats.json")


def _no_positive_tile() -> None:
    from rtscore.config.pipeline import CurriculumStage
    from rtscore.data.loading.sampler import BalancedCurriculumSampler

    BalancedCurriculumSampler(
        np.zeros(10, bool),
        batch_size=4,
        positive_fraction=0.5,
        schedule=[CurriculumStage(start_epoch=1, end_epoch=None, neg_per_pos=1)],
        seed=0,
    )


CASES: dict[str, tuple[Callable[[Path], None], str, str]] = {
    # name: (what the user got wrong, the error class's dotted name, what the message must name)
    "config unknown key": (lambda _: _unknown_config_key(), "rtscore.config.base.ConfigError", "thresholdd"),
    "pipeline config unknown key": (
        lambda _: _pipeline_config_unknown_key(),
        "rtscore.config.base.ConfigError",
        "trainingg",
    ),
    "missing config file": (_missing_config_file, "rtscore.config.base.ConfigError", "no_such_config.yaml"),
    "missing tile store": (_missing_tile_store, "rtscore.data.store.format.TileStoreError", "no_such_store.zarr"),
    "missing checkpoint": (_missing_checkpoint, "rtscore.models.CheckpointError", "no_such_checkpoint.pth"),
    "missing stats": (_missing_stats, "rtscore.data.normalization.stats.NormalizationStatsError", "no_such_stats.json"),
    "train split without positives": (
        lambda _: _no_positive_tile(),
        "rtscore.data.validation.run.DataValidationError",
        "train split",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_error_is_a_pipeline_error_naming_the_culprit(case: str, tmp_path: Path) -> None:
    fn, cls_name, named = CASES[case]
    module_name, _, name = cls_name.rpartition(".")
    cls = getattr(importlib.import_module(module_name), name)
    with pytest.raises(PipelineError) as info:
        fn(tmp_path)
    assert isinstance(info.value, cls), f"{type(info.value).__qualname__}: {info.value}"
    assert named in str(info.value)
