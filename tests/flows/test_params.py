"""Flow parameters and the CLI arguments that feed them: the config's training.seed is the default seed of a
single-seed run (an explicit --seed overrides it); `rts stats --clip` is range-checked like the config key."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from flows.cli.main import main
from flows.params import TrainSeedParams
from rtscore.config import load_pipeline_config, parse_pipeline_config
from tests.flows.configs import tiny_training_config, write_config


def _config(tmp_path: Path, seed: int) -> Path:
    data = tiny_training_config()
    data["training"]["seed"] = seed
    return write_config(tmp_path / "pipeline.yaml", data)


def test_train_seed_params_default_to_the_config_seed() -> None:
    data = tiny_training_config()
    data["training"]["seed"] = 7
    cfg = parse_pipeline_config(data)
    assert TrainSeedParams(config="c", run_dir="r").seed_of(cfg) == 7
    assert TrainSeedParams(config="c", run_dir="r", seed=3).seed_of(cfg) == 3
    assert TrainSeedParams(config="c", run_dir="r", seed=0).seed_of(cfg) == 0  # 0 is a seed, not "unset"


def test_train_seed_flow_trains_the_config_seed_unless_told(tmp_path: Path) -> None:
    """The train-seed flow's one work item: the config's training.seed, unless the run names a seed."""
    from flows.common import selections
    from rtscore.stages import BY_NAME
    from rtscore.storage import RunDir

    config = str(_config(tmp_path, seed=7))
    cfg = load_pipeline_config(config)
    run = RunDir(str(tmp_path / "run"))
    for params, seed in (
        (TrainSeedParams(config=config, run_dir=run.uri), 7),
        (TrainSeedParams(config=config, run_dir=run.uri, seed=5), 5),
    ):
        assert [s["seed"] for s in selections(BY_NAME["train-seed"], params, cfg, run)] == [seed]


def test_rts_train_without_seed_uses_training_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import flows.train as train_flow

    seen: list[int | None] = []

    def fake_flow(params: TrainSeedParams) -> Any:
        seen.append(params.seed)
        seed = params.seed_of(load_pipeline_config(params.config))
        res = SimpleNamespace(seed=seed, best_metric=0.5, best_epoch=1, epochs_run=1, seed_dir="d")
        return SimpleNamespace(result=res)

    monkeypatch.setattr(train_flow, "train_seed", fake_flow)
    monkeypatch.setattr("flows.common.check_inputs", lambda stage, params: None)  # an empty run: nothing to read
    monkeypatch.setattr("flows.common.start_local_api", lambda: None)  # no flow runs: no server to start
    config = str(_config(tmp_path, seed=7))
    assert main(["train", "--config", config, "--run", str(tmp_path / "run")]) == 0
    assert main(["train", "--config", config, "--run", str(tmp_path / "run"), "--seed", "3"]) == 0
    assert seen == [None, 3], "no --seed: the flow takes training.seed; --seed overrides it"
    out = capsys.readouterr().out
    assert "seed 7 " in out and "seed 3 " in out


def test_train_help_says_the_default_is_the_config_seed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "overrides training.seed of the config" in help_text and "default 42" not in help_text


@pytest.mark.parametrize("clip", [["90", "10"], ["-1", "50"], ["5", "101"], ["20", "20"]])
def test_stats_clip_is_range_checked(clip: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["stats", "--dataset", str(tmp_path / "missing.zarr"), "--clip", *clip])
    err = capsys.readouterr().err
    assert rc == 2 and f"--clip: {clip[0]} {clip[1]}" in err and "0 <= low < high <= 100" in err
    assert "Traceback" not in err and not (tmp_path / "normalization_stats.json").exists()
