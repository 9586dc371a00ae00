"""One typed interface per command: every option of every `rts` command is a field of its parameter model and
every field an option; the pipeline commands carry every field of the run's cache key; docs/commands.md is the
one generated from the models; every command the docs show parses, and `--help` of every command answers."""

from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path

import pytest

from flows.cli.docs import DOC, EXAMPLES, render
from flows.cli.main import COMMANDS, parse, parser
from flows.cli.options import options
from flows.params import DataParams, RunParams
from tests.helpers import PROJECT_ROOT

DOCUMENTS = [PROJECT_ROOT / "README.md", *sorted((PROJECT_ROOT / "docs").glob("*.md"))]
NAMES = sorted({c.name.split(" ")[0] for c in COMMANDS} | {a for c in COMMANDS for a in c.aliases})


def _subparser(name: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = parser()
    for part in name.split(" "):
        sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
        p = sub.choices[part]
    return p


def _field_paths(model: type, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Every leaf field of a model, nested models' fields by their path."""
    from pydantic import BaseModel

    paths: set[tuple[str, ...]] = set()
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        nested = [a for a in (field.annotation, *getattr(field.annotation, "__args__", ())) if isinstance(a, type)]
        inner = next((a for a in nested if issubclass(a, BaseModel) and a.__module__.startswith("flows")), None)
        paths |= _field_paths(inner, (*prefix, name)) if inner else {(*prefix, name)}
    return paths


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_every_option_is_a_field_of_the_model_and_every_field_an_option(command: object) -> None:
    dests = {a.dest for a in _subparser(command.name)._actions if a.dest not in ("help",)}  # type: ignore[attr-defined]
    fields = {"__".join(path) for path in _field_paths(command.params)}  # type: ignore[attr-defined]
    assert dests == fields, f"options without a field: {dests - fields}; fields without an option: {fields - dests}"


def test_every_pipeline_command_takes_every_field_of_the_cache_key() -> None:
    """--deterministic and every other field a run's stages are keyed by, on every command that runs a flow."""
    keyed = set(RunParams.model_fields)
    flow_commands = [c for c in COMMANDS if issubclass(c.params, RunParams)]
    assert {c.name for c in flow_commands} == {"run", "data", "train", "calibrate", "evaluate-test", "package build"}
    for c in flow_commands:
        flags = {o.flag for o in options(c.params)}
        assert {"--config", "--run", "--deterministic"} <= flags, c.name
        assert keyed <= set(c.params.model_fields), c.name
    assert "--skip-generation" in {o.flag for o in options(DataParams)}


def test_docs_commands_md_is_the_generated_one() -> None:
    assert DOC.read_text() == render(), "docs/commands.md is stale: run `python -m flows.cli.docs` (make docs)"


def _documented_commands() -> list[str]:
    """`rts ...` lines of the fenced code blocks of README.md and docs/*.md (continuations joined, comments and
    optional-part brackets dropped, a leading .venv/bin/ or VAR=value kept out; log lines `rts <command>: ...` are
    output, not commands)."""
    found = []
    for doc in DOCUMENTS:
        block = False
        lines = doc.read_text().splitlines()
        joined: list[str] = []
        for line in lines:
            if line.lstrip().startswith("```"):
                block = not block
                continue
            if not block:
                continue
            if joined and joined[-1].endswith("\\"):
                joined[-1] = joined[-1][:-1] + " " + line.strip()
            else:
                joined.append(line.strip())
        for line in joined:
            # a command, not a line of a command's output ("rts tile: 3 labels ignored ...": a name and a colon)
            m = re.match(r"^(?:[A-Z_]+=\S+\s+)*(?:\S*/bin/)?rts\s+(?![\w-]+:)(.*)$", line)
            if m:
                text = re.split(r"\s+#", m.group(1))[0].replace("[", "").replace("]", "")
                found.append(f"{doc.name}: rts {text.strip()}")
    return found


DOCUMENTED = _documented_commands()


def test_the_docs_show_every_command() -> None:
    shown = {line.split(": rts ", 1)[1].split()[0] for line in DOCUMENTED}
    assert set(NAMES) - {"pipeline"} <= shown, f"commands no document shows: {set(NAMES) - shown}"
    assert all(EXAMPLES[c.name] for c in COMMANDS), "every command has an example"


def test_the_documented_loop_runs_as_typed() -> None:
    """Issue 38: the loop's commands, wherever shown, complete on the first try. `rts warp` names the new ground to
    map (`--scenes`; the config's own scenes are the training ground), every `rts review ingest` says what becomes of
    objects in val/test regions (`--held-out`: a campaign over the trained area holds them as a rule, and the default
    refuses), and every `rts run` of a round's pipeline.yaml trains in a run directory of its own (`--run`: else
    every round shares artifacts/pipeline)."""
    lines = DOCUMENTED + [f"examples: {e}" for es in EXAMPLES.values() for e in es]
    warps = [x for x in lines if ": rts warp " in x]
    ingests = [x for x in lines if ": rts review ingest " in x]
    rounds = [x for x in lines if re.search(r": rts run .*review/pipeline\.yaml", x)]
    assert warps and ingests and rounds
    assert [x for x in warps if "--scenes" not in x] == []
    assert [x for x in ingests if "--held-out" not in x] == []
    assert [x for x in rounds if "--run" not in x] == []


@pytest.mark.parametrize("line", DOCUMENTED + [f"examples: {e}" for es in EXAMPLES.values() for e in es])
def test_every_documented_command_parses(line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parsed and validated into its model exactly as `rts` would, not run (in an empty directory, where every
    relative output can be written)."""
    monkeypatch.chdir(tmp_path)
    argv = shlex.split(line.split(": rts ", 1)[1])
    command, params = parse(argv)
    assert isinstance(params, command.params)


@pytest.mark.parametrize("name", [c.name for c in COMMANDS])
def test_help_of_every_command(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse([*name.split(" "), "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: rts {name}")


def test_the_first_runs_tiling_and_pipeline_blocks_hold_one_set_of_split_rules() -> None:
    """Issue 38: docs/geotiff.md's first run pastes its pipeline block into a copy of quickstart_geotiff.yaml; with
    step 1's tile.yaml, the split rules agree (rts run refuses two values for one rule), so the run starts as typed."""
    import yaml

    from rtscore.config.base import read_yaml
    from rtscore.config.pipeline import parse_pipeline_config
    from rtscore.config.tiling import TilingConfig
    from rtscore.data.tiling.rules import rule_differences

    section = (PROJECT_ROOT / "docs" / "geotiff.md").read_text().split("## A first run on your own scenes")[1]
    blocks = [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", section.split("\n## ")[0], re.S)]
    tiling = TilingConfig.model_validate(blocks[0])
    copy = read_yaml(PROJECT_ROOT / "configs" / "quickstart_geotiff.yaml")
    copy["data"] = {**copy["data"], **blocks[1]["data"]}
    copy["channels"] = blocks[1]["channels"]
    pipeline = parse_pipeline_config(copy, PROJECT_ROOT / "configs")
    assert rule_differences(tiling.split_rules, pipeline.splits) == []
