from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from flows.cli.main import main
from flows.form import FormModel
from rtscore.data.store.reader import ZarrTileStore
from tests.helpers import tiny_pipeline_config

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def configs(tmp_path: Path) -> tuple[Path, dict[str, Path]]:
    data = tiny_pipeline_config()
    gens = {}
    for split, gen in data["data"]["generation"].items():
        gens[split] = tmp_path / f"gen_{split}.yaml"
        gens[split].write_text(yaml.safe_dump(gen))
        data["data"]["generation"][split] = gens[split].name
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(data))
    return pipeline, gens


def test_generate_stats_validate_as_a_new_user_would(
    configs: tuple[Path, dict[str, Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline, gens = configs
    ds = tmp_path / "datasets"
    for split, gen in gens.items():
        assert (
            main(["generate", "--source", "synthetic", "--config", str(gen), "--output", str(ds / f"{split}.zarr")])
            == 0
        )
    assert "wrote" in capsys.readouterr().out
    assert main(["stats", "--dataset", str(ds / "train.zarr"), "--config", str(pipeline)]) == 0
    assert (ds / "normalization_stats.json").exists()
    assert main(["validate", "--dataset", str(ds), "--config", str(pipeline)]) == 0
    assert "validation passed" in capsys.readouterr().out
    assert (ds / "validation" / "report.md").exists()
    # Issue 38: a --stats file that does not exist is refused naming it; it fell back to the run's own stats (here
    # in the datasets' parent, as in a run directory) and passed. Nothing is written.
    (tmp_path / "normalization_stats.json").write_bytes((ds / "normalization_stats.json").read_bytes())
    missing = tmp_path / "no-such-stats.json"
    out = tmp_path / "report"
    argv = ["validate", "--dataset", str(ds), "--config", str(pipeline), "--stats", str(missing), "--output", str(out)]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"--stats {missing}: no such file" in captured.err and "validation passed" not in captured.out
    assert not out.exists()


def test_same_seed_twice_gives_identical_arrays(configs: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    _, gens = configs
    a, b = tmp_path / "a.zarr", tmp_path / "b.zarr"
    for out in (a, b):
        assert main(["generate", "--config", str(gens["train"]), "--output", str(out)]) == 0
    sa, sb = ZarrTileStore(a), ZarrTileStore(b)
    for i in range(len(sa)):
        for field in ("rgb", "alpha", "label", "extra"):
            np.testing.assert_array_equal(getattr(sa[i], field), getattr(sb[i], field))
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files), "byte-identical store"


def test_errors_are_one_clear_line_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "gen.yaml"
    bad.write_text(
        yaml.safe_dump(
            {"split": "train", "synthetic": {"n_positive": 1, "n_negative": 1, "regions": ["a"], "n_postive": 3}}
        )
    )
    assert main(["generate", "--config", str(bad), "--output", str(tmp_path / "x.zarr")]) == 2
    err = capsys.readouterr().err
    assert "rts generate: error:" in err and "synthetic.n_postive: unknown key" in err
    assert not (tmp_path / "x.zarr").exists()
    assert main(["stats", "--dataset", str(tmp_path / "missing.zarr")]) == 2
    assert "tile store not found" in capsys.readouterr().err


def test_import_npz_command(tmp_path: Path) -> None:
    from rtscore.data.store.legacy_npz import BatchWriter
    from tests.conftest import make_tile

    w = BatchWriter(tmp_path / "legacy" / "exact_masks", samples_per_batch=2)
    for i in range(5):
        w.add(make_tile(i))
    w.finalize()
    out = tmp_path / "train.zarr"
    assert main(["import-npz", "--input", str(tmp_path / "legacy"), "--output", str(out), "--split", "train"]) == 0
    assert len(ZarrTileStore(out)) == 5


def test_rts_entry_point_help() -> None:
    """The console script and ``python -m flows.cli`` (what scripts and the fail-fast bench call) both answer."""
    exe = Path(sys.executable).parent / "rts"
    commands = [[sys.executable, "-m", "flows.cli"]] + ([[str(exe)]] if exe.exists() else [])
    for cmd in commands:
        out = subprocess.run([*cmd, "--help"], capture_output=True, text=True, check=True).stdout
        for command in ("generate", "stats", "validate", "data", "import-npz"):
            assert command in out, cmd


def test_after_training_commands_are_wired(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["package", "verify", str(tmp_path / "nothing")]) == 1
    assert "verdict" in capsys.readouterr().out
    for argv in (
        ["run", "--help"],
        ["calibrate", "--help"],
        ["evaluate-test", "--help"],
        ["package", "build", "--help"],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "--skip-generation" in out and "--seeds" in out


class _NoParams(FormModel):
    """A test command without options."""


def _with_command(func: Callable[[Any], int]) -> argparse.ArgumentParser:
    from flows.cli.main import Command, parser

    p = parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    sub.add_parser("boom").set_defaults(command_spec=Command("boom", _NoParams, func, "a test command"))
    return p


def test_pipeline_errors_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from flows.cli.main import run
    from rtscore.evaluation import EvaluationError

    def refuse(args: object) -> int:
        raise EvaluationError("calibration/seed_42/deployment_config.yaml: threshold is null; run calibrate first")

    assert run(_with_command(refuse), ["boom"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "threshold is null" in err


def test_an_error_from_a_dataloader_worker_is_still_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11.16: a loader check failing in a worker process reaches the user as its own message."""
    from torch._utils import ExceptionWrapper

    from flows.cli.main import run
    from rtscore.data.loading.dataset import SampleValueError

    try:
        raise SampleValueError("tile t0003 (index 3 of store /x/train.zarr): label values [7] outside {0, 1, 255}")
    except SampleValueError:
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")

    def train(args: object) -> int:
        wrapped.reraise()
        return 0

    assert run(_with_command(train), ["boom"]) == 2
    err = capsys.readouterr().err
    assert err == "rts boom: error: tile t0003 (index 3 of store /x/train.zarr): label values [7] outside {0, 1, 255}\n"


def test_a_bug_is_not_dressed_as_a_user_error() -> None:
    from flows.cli.main import run

    def bug(args: object) -> int:
        raise ValueError("an internal invariant broke")

    with pytest.raises(ValueError, match="internal invariant"):  # a traceback, not a one-line "user error"
        run(_with_command(bug), ["boom"])


def test_run_directory_uris_are_kept_and_local_paths_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--run: a gs:// URI kept as it is, a local path made absolute, none given: artifacts/<config file name>."""
    from flows.cli import flow_commands
    from flows.cli.main import parse

    monkeypatch.chdir(tmp_path)
    seen: list[str] = []
    monkeypatch.setattr("flows.cli.preflight.check_run", lambda params: seen.append(params.run_dir))
    monkeypatch.setattr("flows.common.check_inputs", lambda stage, params: None)
    monkeypatch.setattr("flows.common.start_local_api", lambda: None)
    for argv in (
        ["calibrate", "--config", "c.yaml", "--run", "gs://bucket/runs/a"],
        ["calibrate", "--config", "c.yaml", "--run", "runs/a"],
        ["calibrate", "--config", "configs/quickstart.yaml"],
    ):
        _, params = parse(argv)
        flow_commands._start_flow(params, "logit-cache")  # type: ignore[type-var]
    assert seen == [
        "gs://bucket/runs/a",
        str(tmp_path.resolve() / "runs/a"),
        str(tmp_path.resolve() / "artifacts/quickstart"),
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--dataset", "gs://bucket/run/datasets/train.zarr"],
        ["predict", "--package", "pkg", "--input", "gs://bucket/scenes/a.tif", "--output", "maps"],
        ["validate", "--dataset", "gs://bucket/run/datasets", "--config", "c.yaml"],
    ],
)
def test_a_gs_uri_where_a_local_path_is_taken_says_where_gs_is_supported(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 11.19: the URI is refused naming the option and the commands that take gs://, not turned into the
    local path 'gs:/bucket/...'."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "gs://bucket/" in err and "is a URI, this option takes a local path" in err
    assert "gs:// is taken by --run of rts data, train, run, calibrate, evaluate-test and package build" in err
    assert "gs:/bucket" not in err.replace("gs://bucket", "")


def test_unwritable_outputs_are_refused_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 11.19: --run / --output under a location that cannot be written: one clear line, exit 2, nothing
    started (no Prefect server, no pass over the data)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for argv in (
        ["train", "--config", "c.yaml", "--run", str(blocker / "run")],
        ["calibrate", "--config", "c.yaml", "--run", str(blocker / "run")],
        ["stats", "--dataset", str(tmp_path / "train.zarr"), "--output", str(blocker / "stats.json")],
        ["drift", "--package", "p", "--input", "x.tif", "--output", str(blocker / "drift")],
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert f"{blocker} is a file, not a directory" in err and "Traceback" not in err
    assert main(["stats", "--dataset", str(blocker / "train.zarr")]) == 2  # the default output, next to it
    assert f"cannot write {blocker}/normalization_stats.json" in capsys.readouterr().err


def test_a_run_directory_that_is_a_file_is_refused_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38: `--run` (or another run or output directory: --dir, map's --output) naming an existing file is
    refused at once, naming it; `rts data` ended in a FileExistsError traceback, `rts train` blamed a missing
    datasets/train.zarr. The file is left as it was."""
    from flows.cli.main import COMMANDS
    from flows.cli.options import options
    from flows.fields import run_location

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    checked = []
    for command in COMMANDS:
        for opt in options(command.params):
            if opt.flag == "--run" or opt.cli.parse is run_location:
                with pytest.raises(SystemExit) as exit_:
                    main([*command.name.split(), opt.flag, str(blocker)])
                assert exit_.value.code == 2, command.name
                err = capsys.readouterr().err
                assert f"argument {opt.flag}: " in err and str(blocker) in err and "is a file" in err, (command, err)
                checked.append(f"{command.name} {opt.flag}")
    assert {"data --run", "train --run", "run --run", "noise-floor --run", "map --output"} <= set(checked), checked
    assert blocker.read_text() == "x"


# ------------------------------------------------------------------- flow commands: checked before any work
FLOW_COMMANDS = [["data"], ["train"], ["run"], ["calibrate"], ["evaluate-test"], ["package", "build"]]


@pytest.fixture
def no_prefect(monkeypatch: pytest.MonkeyPatch) -> None:
    """Prefect's server must not start: every check of a flow command comes first."""

    def refuse() -> None:
        raise AssertionError("Prefect's temporary server was started before the command's checks")

    monkeypatch.setattr("flows.common.start_local_api", refuse)


def _bad_config(tmp_path: Path) -> Path:
    data = tiny_pipeline_config()
    data["training"]["max_epoch"] = 3  # a misspelt key
    return write_yaml(tmp_path / "bad.yaml", data)


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def _one_error(err: str, command: str) -> str:
    assert "Traceback" not in err and err.startswith(f"rts {command}"), err
    assert err.split(": error: ", 1)[0] in (f"rts {command}", f"rts {command} build"), err
    return err


@pytest.mark.parametrize("command", FLOW_COMMANDS, ids=lambda c: "-".join(c))
def test_a_flow_command_refuses_a_bad_config_before_prefect_starts(
    command: list[str], no_prefect: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 21: the config is read and validated first (it was read inside the flow, after Prefect's server)."""
    run = tmp_path / "run"
    assert main([*command, "--config", str(_bad_config(tmp_path)), "--run", str(run)]) == 2
    err = _one_error(capsys.readouterr().err, command[0])
    assert "training.max_epoch: unknown key" in err
    assert not run.exists(), "nothing written"


def test_flow_parameters_are_checked_before_prefect_starts(
    no_prefect: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value the flow's parameters refuse is one line naming the option (it was a pydantic traceback, after
    Prefect's server had started)."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    cfg = write_yaml(tmp_path / "p.yaml", tiny_pipeline_config())
    base = ["--config", str(cfg), "--run", str(tmp_path / "run")]
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    cases = (
        (["train", *base, "--seed", "-1"], "--seed: Input should be greater than or equal to 0"),
        (["run", *base, "--seeds", "1", "1"], "--seeds: expected a non-empty list of distinct non-negative seeds"),
        (["calibrate", *base, "--seeds", "-2"], "--seeds: expected a non-empty list of distinct"),
        (["train", *base, "--seed", "1", "--seeds", "2", "3"], "--seed and --seeds: give one"),
        (["run", *base, "--execution", "distributed"], "--execution distributed needs PREFECT_API_URL"),
    )
    # No API URL anywhere: not in the environment, nor in a Prefect settings context that the session's
    # prefect_harness, used by an earlier test of this worker, keeps open with its server's URL.
    with temporary_settings(restore_defaults={PREFECT_API_URL}):
        for argv, expected in cases:
            assert main(argv) == 2, argv
            assert expected in _one_error(capsys.readouterr().err, argv[0])
    assert not (tmp_path / "run").exists()


def test_missing_inputs_are_named_before_prefect_starts(
    no_prefect: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the command's first stage reads is checked before Prefect: the error names it (and what makes it)."""
    cfg = write_yaml(tmp_path / "p.yaml", tiny_pipeline_config())
    run = tmp_path / "run"
    base = ["--config", str(cfg), "--run", str(run)]
    for argv, expected in (
        (["train", *base], f"run {run} has no datasets/train.zarr (an input of train-seed); run rts data first"),
        (["calibrate", *base], f"no trained seed under {run}/seeds"),
        (["evaluate-test", *base], "calibration/summary.json is missing"),
        (["package", "build", *base], "calibration/summary.json is missing"),
        (["run", *base, "--skip-generation"], f"{run}/datasets/train.zarr does not exist (generate-dataset reads"),
    ):
        assert main(argv) == 2, argv
        assert expected in _one_error(capsys.readouterr().err, argv[0])
    assert not run.exists(), "nothing written"


def test_a_data_root_cut_with_other_split_rules_is_refused_before_prefect_starts(
    no_prefect: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 38 (5): split rules are written in the tiling config (rts tile records them in the root's tiling.json)
    and in the pipeline config; rts data and rts run refuse two values of one rule, naming both files, the rule and
    both values, before Prefect starts and before anything is written."""
    import json

    from tests.helpers import geotiff_pipeline_config

    root = tmp_path / "tiles"
    root.mkdir()
    rules = {"min_val_regions": 1, "min_test_positives": 2, "min_val_positives": 5}  # what rts tile checked
    (root / "tiling.json").write_text(json.dumps({"config": {"split_rules": rules}}))
    cfg = write_yaml(tmp_path / "p.yaml", geotiff_pipeline_config(str(root)))  # splits.min_test_positives: 2
    run = tmp_path / "run"
    for command in ("data", "run"):
        assert main([command, "--config", str(cfg), "--run", str(run)]) == 2
        err = _one_error(capsys.readouterr().err, command)
        assert (
            f"split_rules.min_val_regions is 1 in {root / 'tiling.json'}, splits.min_val_regions is 2 in {cfg}" in err
        )
        assert f"split_rules.min_val_positives is 5 in {root / 'tiling.json'}, splits.min_val_positives is 20" in err
        assert "min_test_positives" not in err, "a rule both files give alike is not named"
    assert not run.exists(), "nothing written"


def test_a_gs_run_is_checked_before_prefect_starts(
    gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A gs:// run: the credentials load and the bucket can be listed, before Prefect's server starts (a missing
    bucket read as an empty run before, and failed at the first upload)."""
    from tests.conftest import GCS_TEST_BUCKET

    class Started(Exception):
        pass

    def started() -> None:
        raise Started

    monkeypatch.setattr("flows.common.start_local_api", started)
    cfg = str(write_yaml(tmp_path / "p.yaml", tiny_pipeline_config()))
    assert main(["data", "--config", cfg, "--run", "gs://no-such-bucket/runs/a"]) == 2
    err = _one_error(capsys.readouterr().err, "data")
    assert "gs://no-such-bucket/runs/a: bucket gs://no-such-bucket does not exist" in err
    with pytest.raises(Started):  # a bucket that exists: on to Prefect
        main(["data", "--config", cfg, "--run", f"gs://{GCS_TEST_BUCKET}/runs/a"])
    creds = tmp_path / "creds.json"
    creds.write_text("not json")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST")
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(creds))
    assert main(["train", "--config", cfg, "--run", f"gs://{GCS_TEST_BUCKET}/runs/a"]) == 2
    assert f"GOOGLE_APPLICATION_CREDENTIALS={creds} cannot be used" in _one_error(capsys.readouterr().err, "train")


def test_a_config_error_reaches_the_user_at_once(tmp_path: Path) -> None:
    """Issue 21's acceptance point, as a user runs it: `rts run` with a bad config answers at once (it took 25-78 s,
    after Prefect's server had started), without a Prefect traceback, leaving no run directory and no server. "At
    once" is what the command does not do before it answers: import Prefect (let alone start its server) or torch;
    the child records the modules it imported when it exits. How long it takes is a bench figure
    (bench/fail_fast_bench.py: about a second, the interpreter's start and the config's imports)."""
    import json

    import psutil

    home = tmp_path / "prefect-home"
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PYTHONPATH=str(ROOT))
    run = tmp_path / "run"
    imported = tmp_path / "imported.json"
    rts = (  # `python -m flows.cli.main` (its __main__), recording what it imported when it exits
        "import atexit, json, sys\n"
        f"atexit.register(lambda: open({str(imported)!r}, 'w').write(json.dumps(sorted(sys.modules))))\n"
        "from flows.cli.main import main\n"
        "sys.exit(main())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", rts, "run", "--config", str(_bad_config(tmp_path)), "--run", str(run)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert "training.max_epoch: unknown key" in _one_error(done.stderr, "run")
    assert "prefect" not in (done.stdout + done.stderr).lower(), "no word from Prefect"
    heavy = {m.split(".")[0] for m in json.loads(imported.read_text())} & {"prefect", "torch"}
    assert not heavy, f"imported before the config error was told: {sorted(heavy)}"
    assert not run.exists()
    left = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get("PREFECT_HOME") == str(home):
                left.append(p.cmdline())
    assert not left, f"processes left: {left}"


def test_rts_tile_resumes_from_another_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 21: `rts tile` re-run with the config named from elsewhere (absolute, or from another directory)
    resumes: the fingerprint holds the inputs' resolved paths, not the paths as typed (it refused, and
    --overwrite re-tiled everything)."""
    from tests.data.tiling.test_run import base_config, mosaic_scenes

    root = mosaic_scenes(tmp_path)
    write_yaml(root / "tile.yaml", base_config(root))
    monkeypatch.chdir(root)
    assert main(["tile", "--config", "tile.yaml"]) == 0
    tiles = sorted(p.name for p in (root / "tiles").rglob("*.tif"))
    (root / "elsewhere").mkdir()
    monkeypatch.chdir(root / "elsewhere")
    assert main(["tile", "--config", "../tile.yaml"]) == 0
    assert main(["tile", "--config", str(root / "tile.yaml")]) == 0
    assert sorted(p.name for p in (root / "tiles").rglob("*.tif")) == tiles
