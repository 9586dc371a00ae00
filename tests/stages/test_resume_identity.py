"""A resume point is resumed only under the identity that wrote it (issue 21).

For each resumable stage, a pair: after a simulated edit of a module in the stage's code closure the work
starts from scratch and the old state is set aside (kept, named in one warning); after a real ``kill -9`` with
the code unchanged the same call resumes and ends bit-identical to an uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from rtscore import stages
from rtscore.storage import RunDir, RunLayout
from rtscore.train.records import recorded_checkpoints
from tests.helpers import PROJECT_ROOT, CodeEdits, copy_run, make_data_run
from tests.train.conftest import tiny_train_config

SEED = 1
EPOCHS = 3


@pytest.fixture(scope="module")
def data_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_data_run(tmp_path_factory.mktemp("identity") / "run", tiny_train_config())


@pytest.fixture
def run_copy(data_run: Path, tmp_path: Path) -> Path:
    return copy_run(data_run, tmp_path / "run")


@pytest.fixture
def edits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CodeEdits]:
    yield CodeEdits(monkeypatch)
    stages.code_fingerprint.cache_clear()


def run_killed(script: str) -> None:
    """Run ``script`` in a fresh interpreter that SIGKILLs itself where the script says (``kill()``)."""
    prelude = "import os, signal\ndef kill():\n    os.kill(os.getpid(), signal.SIGKILL)\n"
    env = {**os.environ, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED", "0")}
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records]


def weights(path: Path) -> dict[str, bytes]:
    from rtscore.models import load_checkpoint

    state = load_checkpoint(path)
    tensors = state.get("ema_state_dict", state)
    return {k: v.numpy().tobytes() for k, v in tensors.items()}


# --------------------------------------------------------------------------------------------- train-seed
@pytest.fixture(scope="module")
def trained_run(data_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The data run with SEED trained uninterrupted by the current code (EPOCHS epochs): the first training of
    the edit test and the reference of the kill test, trained once for both (read only; copy it to write)."""
    run = copy_run(data_run, tmp_path_factory.mktemp("identity-trained") / "run")
    stages.train_seed(str(run), tiny_train_config(max_epochs=EPOCHS), SEED)
    return run


@pytest.mark.slow
def test_a_code_edit_in_the_train_closure_retrains_from_scratch_and_sets_the_old_checkpoints_aside(
    trained_run: Path, tmp_path: Path, edits: CodeEdits, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = tiny_train_config(max_epochs=EPOCHS)
    run_copy = copy_run(trained_run, tmp_path / "run")  # SEED trained by the unedited code
    seed_dir = run_copy / RunLayout.SEED_DIR.at(seed=SEED)
    old_best = (seed_dir / "best_deployment.pth").read_bytes()
    old_latest = (seed_dir / "resume_latest.pth").read_bytes()

    edits.edit("rtscore/losses/focal.py")  # in the train stage's closure, as the report edited it
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="rtscore"):
        result = stages.train_seed(str(run_copy), cfg, SEED)

    said = messages(caplog)
    assert not [m for m in said if "resuming from the checkpoint" in m], said
    assert any(f"seed {SEED}: attempt 2, from scratch" in m for m in said), said
    (aside,) = (seed_dir / "set_aside").iterdir()
    assert [m for m in said if "set aside in" in m] == [m for m in said if str(aside) in m], "one line names where"
    assert (aside / "best_deployment.pth").read_bytes() == old_best, "the stale weights are kept for the user"
    assert (aside / "resume_latest.pth").read_bytes() == old_latest
    rows = [json.loads(x)["epoch"] for x in (seed_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == list(range(1, result.result.epochs_run + 1)), "every epoch trained again"
    attempts = json.loads((seed_dir / "attempts.json").read_text())["attempts"]
    assert [a["resumed_from_epoch"] for a in attempts] == [0, 0]
    # The run root records only the new training's checkpoints.
    assert [e for e, _ in recorded_checkpoints(RunDir(str(run_copy)), SEED)] == sorted(
        int(p.stem.rpartition("_")[2]) for p in seed_dir.glob("resume_epoch_*.pth")
    )
    # Retrained by the (same, deterministic) code from scratch: the very weights of the first training.
    assert weights(seed_dir / "best_deployment.pth") == weights(aside / "best_deployment.pth")


@pytest.mark.slow
def test_kill_9_mid_training_then_the_same_code_resumes_bit_identically(
    run_copy: Path, trained_run: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cfg = tiny_train_config(max_epochs=EPOCHS)
    ref = trained_run  # the same data, trained uninterrupted

    run_killed(
        f"""
        from rtscore import stages
        from tests.train.conftest import tiny_train_config

        def on_epoch_end(epoch, row):
            if epoch == 2:  # after epoch 2's checkpoint is written and recorded
                kill()

        stages.train_seed({str(run_copy)!r}, tiny_train_config(max_epochs={EPOCHS}), {SEED}, on_epoch_end=on_epoch_end)
        """
    )
    with caplog.at_level(logging.INFO, logger="rtscore"):
        stages.train_seed(str(run_copy), cfg, SEED)
    assert any(f"seed {SEED}: attempt 2, resuming from the checkpoint of epoch 2" in m for m in messages(caplog))
    a, b = run_copy / RunLayout.SEED_DIR.at(seed=SEED), ref / RunLayout.SEED_DIR.at(seed=SEED)
    assert not (a / "set_aside").exists()
    assert weights(a / "best_deployment.pth") == weights(b / "best_deployment.pth")
    assert weights(a / "resume_latest.pth") == weights(b / "resume_latest.pth")


# ------------------------------------------------------------------------------- generate-dataset staging
def _store_sha(run: Path) -> str:
    entry = RunDir(str(run)).entry(RunLayout.DATASET.at(split="train"))
    assert entry is not None
    return entry.sha256


KILL_AFTER_FIRST_SHARD = """
import rtscore.data.store.writer as writer
real = writer._write_shard

def write_then_die(producer, staging, layout, shard):
    n = real(producer, staging, layout, shard)
    kill()  # one shard complete and staged, the others not
    return n

writer._write_shard = write_then_die
from rtscore import stages
from tests.train.conftest import tiny_train_config
stages.generate_dataset({run!r}, tiny_train_config(), "train")
"""


@pytest.mark.slow
def test_a_generation_killed_mid_store_resumes_under_the_same_code_and_is_set_aside_after_an_edit(
    data_run: Path, tmp_path: Path, edits: CodeEdits, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rtscore.data.store.writer as writer

    cfg = tiny_train_config()
    ref = data_run  # its train split: generated uninterrupted by the same code under the same config (read only)

    produced: list[int] = []
    real = writer._write_shard

    def counting(producer, staging, layout, shard):  # type: ignore[no-untyped-def]
        produced.append(shard)
        return real(producer, staging, layout, shard)

    monkeypatch.setattr(writer, "_write_shard", counting)

    # kill -9 after one shard; the same code resumes: only the other shards are rendered, same store.
    resumed = tmp_path / "resumed"
    run_killed(KILL_AFTER_FIRST_SHARD.format(run=str(resumed)))
    stages.generate_dataset(str(resumed), cfg, "train")
    assert produced and 0 not in produced, f"shard 0 was staged before the kill and kept: {produced}"
    assert _store_sha(resumed) == _store_sha(ref)

    # kill -9 again, then an edit in the renderer's closure: the staged shard is set aside, all re-rendered.
    produced.clear()
    edited = tmp_path / "edited"
    run_killed(KILL_AFTER_FIRST_SHARD.format(run=str(edited)))
    edits.edit("rtscore/data/synthetic/_scene.py")
    with caplog.at_level(logging.WARNING, logger="rtscore"):
        stages.generate_dataset(str(edited), cfg, "train")
    assert 0 in produced, "the shard staged by other code is rendered again"
    (aside,) = (edited / "datasets/set_aside").iterdir()
    assert (aside / ".train.zarr.partial/zarr.json").is_file(), "kept for the user"
    assert any("set aside in" in m and str(aside) in m for m in messages(caplog))
    assert _store_sha(edited) == _store_sha(ref)


# ------------------------------------------------------------------------------------------- logit-cache
@pytest.fixture(scope="module")
def calib_run(data_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Data stages done and untrained (seeded) weights for one seed: a logit cache needs no training. The data
    stages are the module's (calib_config differs from tiny_train_config only in calibration.large_rts_bbox_m,
    which no data stage reads)."""
    from tests.calibrate.conftest import calib_config
    from tests.helpers import fake_trained_seed

    cfg = calib_config()
    run = copy_run(data_run, tmp_path_factory.mktemp("calib") / "run")
    fake_trained_seed(run, cfg, SEED)
    return run


def _cache_sha(run: Path) -> str:
    entry = RunDir(str(run)).entry(RunLayout.LOGIT_CACHE.at(seed=SEED))
    assert entry is not None
    return entry.sha256


@pytest.mark.slow
def test_a_logit_cache_of_other_code_is_never_calibrated_on_and_a_killed_one_is_rebuilt_identically(
    calib_run: Path, tmp_path: Path, edits: CodeEdits
) -> None:
    from rtscore.calibrate.cache import CacheError
    from tests.calibrate.conftest import calib_config

    cfg = calib_config()
    ref = copy_run(calib_run, tmp_path / "ref")
    stages.logit_cache(str(ref), cfg, SEED)
    stages.calibrate(str(ref), cfg, [SEED])

    # kill -9 after the first batch of the pass: nothing half-built is recorded or reused; the same call
    # builds the cache again, byte for byte the uninterrupted one.
    killed = copy_run(calib_run, tmp_path / "killed")
    run_killed(
        f"""
        import rtscore.calibrate.cache as cache
        real = cache.tile_counts
        calls = []

        def counts_then_die(*args, **kwargs):
            calls.append(1)
            if len(calls) > 3:
                kill()
            return real(*args, **kwargs)

        cache.tile_counts = counts_then_die
        from rtscore import stages
        from tests.calibrate.conftest import calib_config
        stages.logit_cache({str(killed)!r}, calib_config(), {SEED})
        """
    )
    assert RunDir(str(killed)).entry(RunLayout.LOGIT_CACHE.at(seed=SEED)) is None
    stages.logit_cache(str(killed), cfg, SEED)
    assert _cache_sha(killed) == _cache_sha(ref)

    # An edit in the cache's closure: calibration refuses the cache the old code built, naming it ...
    edits.edit("rtscore/calibrate/cache.py")
    with pytest.raises(CacheError, match="logit_cache.zarr was computed by other code, config or inputs"):
        stages.calibrate(str(ref), cfg, [SEED])
    # ... and the cache recomputed by the current code is used.
    stages.logit_cache(str(ref), cfg, SEED)
    stages.calibrate(str(ref), cfg, [SEED])
