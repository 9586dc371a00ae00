from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rtscore.config.pipeline import LossConfig
from rtscore.data.store.reader import ZarrTileStore
from rtscore.losses import ClassBalancedBCELoss
from rtscore.models import load_checkpoint
from rtscore.runtime import DeviceError
from rtscore.storage import RunLayout
from rtscore.train import checkpoint as ckpt
from rtscore.train.distributed import Ranks
from rtscore.train.loop import (
    RunState,
    TrainingError,
    batch_params,
    build_setup,
    epoch_metric_names,
    resume_hash,
    train_seed,
)
from tests.helpers import copy_run
from tests.train.conftest import REF_EPOCHS, REF_SEED, TrainedRun, tiny_train_config


def _weights(path: Path) -> dict[str, torch.Tensor]:
    state = load_checkpoint(path)
    return state.get("live_state_dict", state)


def _assert_identical(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].numpy().tobytes() == b[k].numpy().tobytes(), k


def _kill_after_epoch_2(epoch: int, row: dict) -> None:
    if epoch == 2:
        raise KeyboardInterrupt("simulated kill")


@pytest.fixture(scope="module")
def killed_run(data_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data run with seed 7 trained from scratch as the reference run was (``trained_run``) and killed after
    epoch 2, its checkpoint written: where every resume test starts, killed once. Read only: copy it to resume."""
    run = copy_run(data_run, tmp_path_factory.mktemp("killed") / "run")
    with pytest.raises(KeyboardInterrupt):
        train_seed(tiny_train_config(max_epochs=REF_EPOCHS), run, REF_SEED, on_epoch_end=_kill_after_epoch_2)
    return run


@pytest.mark.slow
def test_trains_writes_outputs_and_same_seed_gives_same_weights(trained_run: TrainedRun, killed_run: Path) -> None:
    seed_dir = trained_run.seed_dir  # seed 7 trained uninterrupted for 3 epochs
    assert Path(trained_run.result.seed_dir) == seed_dir
    for name in (
        "best_deployment.pth",
        "resume_latest.pth",
        "metrics.jsonl",
        "curves.png",
        "run_summary.json",
        "run_summary.md",
    ):
        assert (seed_dir / name).exists(), name
    assert sorted(p.name for p in seed_dir.glob("resume_epoch_*.pth")) == [
        "resume_epoch_0002.pth",
        "resume_epoch_0003.pth",
    ]
    rows = [json.loads(x) for x in (seed_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[0]["lr_encoder"] == 0.0 and rows[1]["lr_encoder"] > 0  # frozen, then unfrozen
    assert rows[0]["curriculum_neg_per_pos"] == 1 and rows[2]["curriculum_neg_per_pos"] == 2
    assert {
        "val_realistic_pr_auc_geomean",
        "val_balanced_pr_auc",
        "val_realistic_pr_auc_1_200_ci_low",
        "val_realistic_effective_neg_tiles_1_200",
        "val_balanced_iou_rts",
        "val_realistic_object_precision_iou30_1_200",
    } <= set(rows[-1])
    assert sorted(k for k in rows[-1] if k.startswith("val_")) == epoch_metric_names(tiny_train_config())
    best = load_checkpoint(seed_dir / "best_deployment.pth")
    assert all(isinstance(v, torch.Tensor) for v in best.values()) and "encoder.features.0.0.weight" in best
    summary = json.loads((seed_dir / "run_summary.json").read_text())
    assert "flags" in summary["overfitting"]
    # Same seed, fresh start: bit-identical weights. The killed run trained epochs 1-2 from scratch in another
    # directory; its epoch-2 checkpoint is the reference's (test_kill_and_resume_is_bit_identical: and so is
    # everything after it).
    again = load_checkpoint(killed_run / f"seeds/seed_{REF_SEED}/resume_latest.pth")
    first = load_checkpoint(seed_dir / "resume_epoch_0002.pth")
    assert again["epoch"] == first["epoch"] == 2
    _assert_identical(first["live_state_dict"], again["live_state_dict"])
    _assert_identical(first["ema_state_dict"], again["ema_state_dict"])


@pytest.mark.slow
def test_kill_and_resume_is_bit_identical(trained_run: TrainedRun, killed_run: Path, tmp_path: Path) -> None:
    cfg = tiny_train_config(max_epochs=REF_EPOCHS)
    run = copy_run(killed_run, tmp_path / "run")  # killed after epoch 2 (KeyboardInterrupt)
    assert load_checkpoint(run / "seeds/seed_7/resume_latest.pth")["epoch"] == 2
    result = train_seed(cfg, run, REF_SEED)  # the same command again resumes
    assert result.epochs_run == 3
    a, b = run / "seeds/seed_7", trained_run.seed_dir
    _assert_identical(_weights(a / "resume_latest.pth"), _weights(b / "resume_latest.pth"))
    _assert_identical(load_checkpoint(a / "best_deployment.pth"), load_checkpoint(b / "best_deployment.pth"))
    assert (
        load_checkpoint(a / "resume_latest.pth")["ema_state_dict"].keys()
        == load_checkpoint(b / "best_deployment.pth").keys()
    )
    rows = [json.loads(x)["epoch"] for x in (a / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3]


@pytest.mark.slow
def test_a_checkpoint_of_another_config_is_set_aside_and_the_seed_trains_from_scratch(
    trained_run: TrainedRun, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_copy = copy_run(trained_run.run, tmp_path / "run")  # seed 7 trained by tiny_train_config(max_epochs=3)
    seed_dir = run_copy / "seeds/seed_7"
    old_best = (seed_dir / "best_deployment.pth").read_bytes()
    changed = tiny_train_config(max_epochs=3, batch_size=2)
    with caplog.at_level("WARNING"):
        result = train_seed(changed, run_copy, REF_SEED)
    assert result.epochs_run >= 1
    rows = [json.loads(x)["epoch"] for x in (seed_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == 1, "trained from scratch, not resumed"
    (aside,) = (seed_dir / "set_aside").iterdir()
    assert (aside / "best_deployment.pth").read_bytes() == old_best, "the old weights are kept for the user"
    assert (aside / "resume_latest.pth").is_file()
    assert any("set aside in" in r.getMessage() and str(aside) in r.getMessage() for r in caplog.records)
    # Early-stopping settings may change on resume (they come from the config): that one resumes.
    relaxed = tiny_train_config(max_epochs=3, batch_size=2, early_stopping={"patience": 9})
    train_seed(relaxed, run_copy, REF_SEED)
    assert len(list((seed_dir / "set_aside").iterdir())) == 1


def test_fp16_on_cpu_is_refused_before_any_step(run_copy: Path) -> None:
    cfg = tiny_train_config(precision="fp16")
    with pytest.raises(DeviceError, match="fp16 needs a CUDA device"):
        train_seed(cfg, run_copy, 1)
    assert not (run_copy / "seeds").exists()


@pytest.mark.slow
def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(run_copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tiny_train_config(max_epochs=3)
    import rtscore.train.loop as loop

    real = loop.train_one_epoch

    def poisoned(s, epoch, on_step=None):  # type: ignore[no-untyped-def]
        if epoch == 2:
            with torch.no_grad():
                for p in s.model.parameters():
                    p.fill_(float("nan"))
        return real(s, epoch, on_step)

    monkeypatch.setattr(loop, "train_one_epoch", poisoned)
    with pytest.raises(TrainingError, match="non-finite training loss .* at epoch 2"):
        train_seed(cfg, run_copy, 3)
    state = load_checkpoint(run_copy / "seeds/seed_3/resume_latest.pth")
    assert state["epoch"] == 1
    assert all(torch.isfinite(v).all() for v in state["live_state_dict"].values() if v.is_floating_point())


@pytest.mark.slow
def test_early_stop_ends_the_run_and_a_rerun_does_not_continue_it(run_copy: Path) -> None:
    cfg = tiny_train_config(max_epochs=4, early_stopping={"patience": 1, "min_delta": 10.0, "start_epoch": 1})
    r = train_seed(cfg, run_copy, 9)
    assert r.stopped_early and r.epochs_run == 2
    again = train_seed(cfg, run_copy, 9)
    assert again.stopped_early and again.epochs_run == 2
    rows = (run_copy / "seeds/seed_9/metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2


def test_run_state_saves_the_dict_earlier_versions_wrote_and_reads_theirs() -> None:
    fresh = RunState(mlflow_run_id="r")
    assert fresh.to_checkpoint() == {"best_epoch": 0, "mlflow_run_id": "r", "stopped_early": False}
    assert math.isnan(fresh.best_metric_or_nan)
    best = RunState(best_epoch=3, mlflow_run_id=None, stopped_early=True, best_metric=0.25)
    extra = best.to_checkpoint()
    assert list(extra) == ["best_epoch", "mlflow_run_id", "stopped_early", "best_metric"]  # the old key order
    assert RunState.from_checkpoint(extra) == best
    # What earlier versions saved: the same plain dict, before any best epoch without best_metric; unknown keys
    # (none were ever written, but a checkpoint is data) are ignored.
    old = {"best_epoch": 0, "mlflow_run_id": None, "stopped_early": False, "note": "x"}
    assert RunState.from_checkpoint(old) == RunState()
    assert RunState.from_checkpoint({}) == RunState()


@pytest.mark.slow
def test_resume_from_a_checkpoint_with_the_old_dict_state(
    trained_run: TrainedRun, killed_run: Path, tmp_path: Path
) -> None:
    cfg = tiny_train_config(max_epochs=REF_EPOCHS)
    expected = trained_run.result  # seed 7 trained uninterrupted
    run_copy = copy_run(killed_run, tmp_path / "run")  # killed after epoch 2
    latest = run_copy / "seeds/seed_7/resume_latest.pth"
    state = load_checkpoint(latest)
    saved = state["extra"]
    # Rewrite it as the untyped dict the loop used to mutate (same keys, insertion order of the old code).
    state["extra"] = {
        "best_epoch": int(saved["best_epoch"]),
        "mlflow_run_id": None,
        "stopped_early": False,
        "best_metric": float(saved["best_metric"]),
    }
    ckpt.save_atomic(state, latest)
    result = train_seed(cfg, run_copy, REF_SEED)
    assert result.model_dump(exclude={"seed_dir"}) == expected.model_dump(exclude={"seed_dir"})
    a, b = run_copy / "seeds/seed_7", trained_run.seed_dir
    _assert_identical(load_checkpoint(a / "best_deployment.pth"), load_checkpoint(b / "best_deployment.pth"))
    _assert_identical(_weights(a / "resume_latest.pth"), _weights(b / "resume_latest.pth"))
    assert load_checkpoint(a / "resume_latest.pth")["extra"] == load_checkpoint(b / "resume_latest.pth")["extra"]
    summary = json.loads((a / "run_summary.json").read_text())
    assert summary["best_epoch"] == expected.best_epoch
    assert summary["best_val_realistic_pr_auc_geomean_smoothed"] == expected.best_metric


def test_class_balanced_weight_comes_from_the_train_split_counts(data_run: Path) -> None:
    """Guide §5.4: n_bg / n_rts of the train split (its usable tiles' labelled pixels), once per run."""
    cfg = tiny_train_config()
    cfg = cfg.model_copy(update={"loss": LossConfig(name="class_balanced_ce", class_weighting="linear")})
    s = build_setup(cfg, data_run, seed=42)
    assert isinstance(s.loss_fn, ClassBalancedBCELoss)
    store = ZarrTileStore(data_run / RunLayout.DATASET.at(split="train"), extra_channels=["ndvi"])
    rts = bg = 0
    for i in range(len(store)):
        t = store[i]
        label = t.label[t.alpha > 0]
        rts, bg = rts + int((label == 1).sum()), bg + int((label == 0).sum())
    assert rts > 0 and s.loss_fn.pos_weight == pytest.approx(bg / rts)


@pytest.mark.slow
def test_truncated_resume_latest_resumes_from_the_last_intact_epoch(killed_run: Path, tmp_path: Path) -> None:
    """Issue 11.15: `rts train` again after a truncated resume_latest.pth continues from resume_epoch_NNNN.pth."""
    cfg = tiny_train_config(max_epochs=REF_EPOCHS)
    run_copy = copy_run(killed_run, tmp_path / "run")  # killed after epoch 2
    seed_dir = run_copy / "seeds/seed_7"
    latest = seed_dir / "resume_latest.pth"
    latest.write_bytes(latest.read_bytes()[:100])
    result = train_seed(cfg, run_copy, REF_SEED)
    assert result.epochs_run == 3
    assert [json.loads(x)["epoch"] for x in (seed_dir / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]
    assert load_checkpoint(latest)["epoch"] == 3


@pytest.mark.slow
def test_an_all_nodata_val_split_stops_training_before_the_first_step_naming_the_store(run_copy: Path) -> None:
    """Issue 21 weak case: training without validating first on a val split whose tiles are all NoData trained an
    epoch, then ended in a raw ValueError of the metrics naming no store. Now a PipelineError names the store and
    says what to do, before any step or checkpoint."""
    import shutil

    from rtscore.data.errors import DataValidationError
    from tests.helpers import write_full_nodata_store

    cfg = tiny_train_config()
    val = run_copy / RunLayout.DATASET.at(split="val")
    shutil.rmtree(val)
    write_full_nodata_store(val, 5, size=cfg.data.tile_size, extra=[c.name for c in cfg.channels.extra])
    with pytest.raises(DataValidationError, match=rf"store {val}: no usable tile to evaluate: all its 5 tiles .*"):
        train_seed(cfg, run_copy, 3)
    assert not list((run_copy / RunLayout.SEED_DIR.at(seed=3)).glob("*.pth"))


def test_the_resume_hash_and_the_tracked_params_hold_the_effective_batch() -> None:
    """training.batch_size is per device: a checkpoint resumes on another device count only at the same effective
    batch (2 x 2 as 1 x 4), and one device hashes the config as it is (its resume key unchanged by issue 35)."""
    one, two = tiny_train_config(), tiny_train_config(devices=2, batch_size=2)  # effective 4 both
    assert resume_hash(two, 2) == resume_hash(one, 1) == resume_hash(one)
    assert resume_hash(two, 1) != resume_hash(one)  # 2 tiles a step on one device: another run
    assert resume_hash(tiny_train_config(devices=2), 2) != resume_hash(one)  # 2 x 4: effective 8
    assert batch_params(two, Ranks(0, 2, 0)) == {"ranks": 2, "effective_batch_size": 4}
    assert batch_params(one, Ranks()) == {"ranks": 1, "effective_batch_size": 4}
