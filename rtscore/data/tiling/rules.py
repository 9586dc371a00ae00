"""One set of split rules in two files, checked equal before any work.

A data root cut by ``rts tile`` had its split checked on the plan with the tiling config's ``split_rules``
(recorded in the root's ``tiling.json``); ingestion (a split derived for a root without ``splits.yaml``),
validate-data and ``rts review ingest`` check it with the pipeline config's ``splits``. They are one rule each
(:class:`~rtscore.config.tiling.SplitRules` holds the keys and defaults of the pipeline's), written in two places, so
two values for one rule are refused, naming both files, the rule and both values: the generate-dataset stage and the
commands that start with it (``rts data``, ``rts run``) refuse a pipeline config whose rules are not those its data
roots were cut with; ``rts review ingest`` refuses a tiling config and a pipeline config that disagree.

A root without ``tiling.json`` (not cut by ``rts tile``) or in a bucket is not checked: nothing recorded its rules
where a run can read them before ingestion."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from rtscore.config.base import ConfigError
from rtscore.config.data import SplitsConfig
from rtscore.config.pipeline import PipelineConfig, load_pipeline_config
from rtscore.config.tiling import SplitRules
from rtscore.data.tiling.state import MANIFEST_JSON

PIPELINE = "the pipeline config"  # how a pipeline config without its file at hand is named


def recorded_split_rules(root: str) -> SplitRules | None:
    """The split rules the data root ``root`` was cut with (its ``tiling.json``); None when none are recorded where
    they can be read (a root not cut by ``rts tile``, a ``gs://`` root, a ``tiling.json`` that does not parse)."""
    path = Path(root) / MANIFEST_JSON
    if "://" in root or not path.is_file():
        return None
    try:
        rules = json.loads(path.read_text()).get("config", {}).get("split_rules")
        return None if rules is None else SplitRules.model_validate(rules)
    except (OSError, ValueError, AttributeError, ValidationError):
        return None


def rule_differences(rules: SplitRules, splits: SplitsConfig) -> list[tuple[str, int, int]]:
    """Each rule whose value differs: (rule, the tiling config's value, the pipeline config's value)."""
    return [
        (key, getattr(rules, key), getattr(splits, key))
        for key in SplitRules.model_fields
        if getattr(rules, key) != getattr(splits, key)
    ]


def disagreement(tiling: str, rules: SplitRules, pipeline: str, splits: SplitsConfig) -> str | None:
    """The message refusing ``tiling``'s split rules (a tiling config, or a data root's tiling.json) against
    ``pipeline``'s (None: they agree): both files, every rule that differs with both values, and the two fixes."""
    diffs = rule_differences(rules, splits)
    if not diffs:
        return None
    each = "; ".join(
        f"split_rules.{key} is {ours} in {tiling}, splits.{key} is {theirs} in {pipeline}"
        for key, ours, theirs in diffs
    )
    keys = ", ".join(key for key, _, _ in diffs)
    return (
        f"split rules disagree: {each}. They are one rule each ({keys}): rts tile checked the split with the tiling "
        "config's split_rules, ingestion and validate-data check it with the pipeline config's splits. Write the same "
        f"values in both: in {pipeline}, or in the tiling config's split_rules and run rts tile --config <it> again "
        "(the tiles are kept; its tiling.json records the new rules)"
    )


def check_data_roots(cfg: PipelineConfig, pipeline: str = PIPELINE) -> None:
    """Refuse ``cfg`` (the config of file ``pipeline``) when a data root it ingests was cut with other split rules
    (module docstring), before any work.

    Raises:
        ConfigError: every data root whose ``tiling.json`` records other rules, each rule and both values named.
    """
    roots = {g.geotiff.data_root for _, g in cfg.data.generation.items() if g.source == "geotiff" and g.geotiff}
    problems = []
    for root in sorted(roots):
        rules = recorded_split_rules(root)
        found = None if rules is None else disagreement(str(Path(root) / MANIFEST_JSON), rules, pipeline, cfg.splits)
        if found is not None:
            problems.append(found)
    if problems:
        raise ConfigError("\n".join(problems))


def check_tiling_config(tiling: str, rules: SplitRules, pipeline: str) -> None:
    """Refuse a tiling config (file ``tiling``, its ``split_rules``) and the pipeline config of file ``pipeline``
    (its ``splits``) that disagree on a split rule.

    Raises:
        ConfigError: naming both files, each rule and both values (or the pipeline config unusable).
    """
    found = disagreement(tiling, rules, pipeline, load_pipeline_config(pipeline).splits)
    if found is not None:
        raise ConfigError(found)
