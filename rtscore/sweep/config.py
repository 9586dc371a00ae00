"""The sweep file (YAML): a base pipeline config, named variants as dotted-key overrides of it (or a grid over a
few keys), the baseline, the seeds, the deciding metric and what the chosen variant runs afterwards.

::

    base: ../quickstart.yaml            # relative to this file
    seeds: [42, 43]                     # default: training.seeds of the base config
    metric: val_realistic_pr_auc_geomean
    variants:
      ignore: {loss.boundary_handling: ignore}
      soft_labels: {loss.boundary_handling: soft_labels}
    grid:                               # optional: one variant per combination, named key=value,...
      loss.focal_gamma: [1.0, 3.0]

The baseline is the variant named ``baseline`` (default: the base config unchanged, added when not listed).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from pydantic import Field, JsonValue, field_validator, model_validator

from rtscore.config.base import ConfigError, StrictModel, load_config
from rtscore.config.overrides import check_override_keys

BASELINE = "baseline"
DEFAULT_METRIC = "val_realistic_pr_auc_geomean"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.=,+-]*")


class UntilDecided(StrictModel):
    """What ``--until-decided`` may add: seeds beyond the sweep's own, up to ``max_seeds`` per variant."""

    max_seeds: int = Field(10, ge=2, le=30, description="Most seeds a variant trains in all (the cap).")
    extra_seeds: list[int] | None = Field(
        None, description="Seeds to add, in order (default: the largest sweep seed + 1, + 2, ...)."
    )


class SweepConfig(StrictModel):
    """A sweep: variants of ``base`` judged against the baseline on the same seeds (docs/experiments.md)."""

    name: str | None = Field(None, description="The sweep's name (default: the file's stem).")
    base: str = Field(..., description="The base pipeline config, relative to the sweep file.")
    baseline: str = Field(BASELINE, description="The variant every other is judged against.")
    variants: dict[str, dict[str, JsonValue]] = Field(
        default_factory=dict, description="Named variants: each a mapping of dotted config keys to values."
    )
    grid: dict[str, list[JsonValue]] = Field(
        default_factory=dict,
        description="A grid over a few keys: one variant per combination of their values, named key=value,...",
    )
    seeds: list[int] | None = Field(None, description="The seeds every variant trains (default: the base's).")
    metric: str = Field(DEFAULT_METRIC, description="The deciding validation metric (never a test metric).")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Confidence of the paired intervals.")
    margin: float | None = Field(
        None,
        ge=0.0,
        description="Smallest difference that counts. Default: 2 x the baseline's validation noise floor (guide §10.1: "
        "the std of the PR-AUC geomean over repeated validations of one checkpoint with random negative subsets); 0 "
        "when not measurable.",
    )
    after_training: bool = Field(
        True, description="Whether the chosen variant then runs calibrate, evaluate-test and package."
    )
    test_variants: list[str] = Field(
        default_factory=list,
        description="Variants besides the chosen one to evaluate on Test-Realistic after the choice (named "
        "explicitly; the report says so).",
    )
    until_decided: UntilDecided = Field(default_factory=UntilDecided, description="The cap of --until-decided.")

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or len(set(v)) != len(v) or any(s < 0 for s in v)):
            raise ValueError(f"expected a non-empty list of distinct non-negative seeds; got {v}")
        return v

    @field_validator("variants")
    @classmethod
    def _variants(cls, v: dict[str, dict[str, JsonValue]]) -> dict[str, dict[str, JsonValue]]:
        for name, overrides in v.items():
            _check_name(name)
            check_override_keys(overrides, f"variant {name}")
        return v

    @field_validator("grid")
    @classmethod
    def _grid(cls, v: dict[str, list[JsonValue]]) -> dict[str, list[JsonValue]]:
        check_override_keys(v, "grid")
        for key, values in v.items():
            if not values:
                raise ValueError(f"grid key {key} has no values")
        return v

    @model_validator(mode="after")
    def _names(self) -> SweepConfig:
        names = list(self.variants)
        for name in self.grid_variants():
            try:
                _check_name(name)
            except ValueError as err:  # a grid value names the variant's run directory too (a slash would nest it)
                raise ValueError(f"grid: {err}; list such variants under variants, each with a name") from None
            if name in names:
                raise ValueError(f"variant {name} is named twice (in variants and by the grid)")
            names.append(name)
        if self.baseline != BASELINE and self.baseline not in names:  # a misspelt baseline: another, unchanged variant
            raise ValueError(
                f"baseline: {self.baseline} is not a variant ({', '.join(names) or 'none listed'}); name a listed "
                f"variant, or leave baseline out for the base config unchanged (named {BASELINE})"
            )
        if not [n for n in names if n != self.baseline]:
            raise ValueError(
                f"no variants besides the baseline {self.baseline}: list at least one under variants or grid"
            )
        for name in self.test_variants:
            if name not in names and name != self.baseline:
                raise ValueError(f"test_variants names {name}, which is not a variant ({', '.join(names)})")
        return self

    def grid_variants(self) -> dict[str, dict[str, JsonValue]]:
        """One variant per combination of the grid's values, named ``key=value,...`` (short keys: last part)."""
        keys = list(self.grid)
        out: dict[str, dict[str, JsonValue]] = {}
        if not keys:
            return out
        for combo in itertools.product(*(self.grid[k] for k in keys)):
            name = ",".join(f"{k.rsplit('.', 1)[-1]}={_compact(v)}" for k, v in zip(keys, combo, strict=True))
            overrides = dict(zip(keys, combo, strict=True))
            if name in out:  # True and "True", "a b" and "ab": one name, and one variant silently lost
                raise ValueError(
                    f"grid: the values {out[name]} and {overrides} both give the variant name {name} (named twice); "
                    "list such variants under variants, each with a name"
                )
            out[name] = overrides
        return out

    def all_variants(self) -> dict[str, dict[str, JsonValue]]:
        """Every variant with its overrides, the baseline first (the base unchanged unless listed)."""
        listed = {**self.variants, **self.grid_variants()}
        baseline = listed.pop(self.baseline, {})
        return {self.baseline: baseline, **listed}


def _compact(v: Any) -> str:
    return str(v).replace(" ", "")


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(
            f"variant name {name!r}: use letters, digits and _ . = , + - (it names the variant's run directory)"
        )


def load_sweep_config(path: str | Path) -> tuple[SweepConfig, Path]:
    """The sweep file and its base config's path (resolved against the file's folder).

    Raises:
        ConfigError: the file is invalid (naming the key and variant), or the base config does not exist.
    """
    p = Path(path)
    sweep = load_config(SweepConfig, p)
    base = (p.resolve().parent / sweep.base).resolve()
    if not base.is_file():
        raise ConfigError(f"invalid sweep {p}: base: {sweep.base} does not exist (looked for {base})")
    if sweep.name is None:
        sweep = sweep.model_copy(update={"name": p.stem})
    return sweep, base


__all__ = ["BASELINE", "DEFAULT_METRIC", "SweepConfig", "UntilDecided", "load_sweep_config"]
