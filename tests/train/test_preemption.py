"""A seed survives losing its worker: checkpoints recorded in the run root, resumed on a fresh worker."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from rtscore import stages
from rtscore.models import load_checkpoint
from rtscore.storage import CACHE_ENV, RunDir, RunLayout, StorageError
from rtscore.train import checkpoint as ckpt
from rtscore.train.records import read_attempts, recorded_checkpoints
from tests.conftest import GCS_TEST_BUCKET
from tests.helpers import CodeEdits, copy_run, flip_byte
from tests.train.conftest import tiny_train_config


class Killed(BaseException):
    """What SIGKILL does to a process, as far as the files are concerned: nothing runs after it."""


def _kill_after(epoch: int):  # type: ignore[no-untyped-def]
    def hook(e: int, row: dict) -> None:
        if e == epoch:
            raise Killed(f"worker lost after epoch {e}")

    return hook


def _tensors(path: Path) -> dict[str, bytes]:
    return {k: v.numpy().tobytes() for k, v in load_checkpoint(path).items()}


def _gcs_env(mp: pytest.MonkeyPatch, cache: Path) -> None:
    """The gs:// settings of every test here, the local mirror in ``cache`` (a worker's disk)."""
    mp.setenv("RTS_GCS_WORKERS", "4")
    mp.setenv("RTS_GCS_RETRY_INITIAL_S", "0.01")
    mp.setenv(CACHE_ENV, str(cache))


def _new_run_uri() -> str:
    return f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"


def copy_gs_run(src: str, dst: str) -> str:
    """A private copy of the gs:// run ``src`` at ``dst`` in the same bucket (``copy_run`` for a bucket): every
    object copied server-side with its metadata (the sha256 a record is checked against), the manifest's URIs
    pointing at the copy. Nothing local: a worker's mirror of ``dst`` starts empty."""
    from rtscore.storage.gcs import parse_gs_uri, shared_client
    from rtscore.storage.manifest import MANIFEST_NAME

    bucket_name, src_prefix = parse_gs_uri(src)
    dst_bucket, dst_prefix = parse_gs_uri(dst)
    assert dst_bucket == bucket_name and src_prefix and dst_prefix
    client = shared_client()
    bucket = client.bucket(bucket_name)
    for blob in client.list_blobs(bucket_name, prefix=f"{src_prefix}/"):
        rel = blob.name[len(src_prefix) + 1 :]
        target = bucket.blob(f"{dst_prefix}/{rel}")
        if rel == MANIFEST_NAME:
            manifest = blob.download_as_bytes().replace(f"{src}/".encode(), f"{dst}/".encode())
            target.upload_from_string(manifest, content_type=blob.content_type)
            continue
        target.metadata = blob.metadata
        token: str | None = None
        while True:
            token, _, _ = target.rewrite(blob, token=token)
            if token is None:
                break
    return dst


@pytest.fixture(scope="module")
def gs_data(gcs_emulator: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A gs:// run whose data stages ran on a CPU "worker" (its own mirror), once for the module. Read only: a test
    trains in a copy of it (``gs_data_run``)."""
    with pytest.MonkeyPatch.context() as mp:
        _gcs_env(mp, tmp_path_factory.mktemp("cpu-worker"))
        uri = _new_run_uri()
        cfg = tiny_train_config()
        stages.save_resolved_config(uri, cfg)
        for split in ("train", "val", "test"):
            stages.generate_dataset(uri, cfg, split)
        stages.normalization_stats(uri, cfg)
    return uri


@pytest.fixture
def gs_data_run(gs_data: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A private copy of the module's gs:// data run, the tests' gs:// settings set."""
    _gcs_env(monkeypatch, tmp_path / "cpu-worker")
    return copy_gs_run(gs_data, _new_run_uri())


@pytest.fixture(scope="module")
def gs_killed(gs_data: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A copy of the gs:// data run where seed 7 (``tiny_train_config()``: 4 epochs, a checkpoint every epoch,
    keep_last_n 2) was killed on one worker after epoch 3, every checkpoint recorded as it was written: where the
    tests of a retry on a fresh worker start, killed once. Read only: a test resumes in a copy (``copy_gs_run``)."""
    with pytest.MonkeyPatch.context() as mp:
        _gcs_env(mp, tmp_path_factory.mktemp("gpu-a"))
        uri = copy_gs_run(gs_data, _new_run_uri())
        with pytest.raises(Killed):
            stages.train_seed(uri, tiny_train_config(), 7, on_epoch_end=_kill_after(3))
    return uri


@pytest.fixture
def edits(monkeypatch: pytest.MonkeyPatch) -> Iterator[CodeEdits]:
    """Simulated code edits, undone after the test with no stage fingerprint of the edited code kept."""
    yield CodeEdits(monkeypatch)
    stages.code_fingerprint.cache_clear()


@pytest.mark.slow
def test_a_seed_killed_on_one_worker_resumes_on_a_fresh_one_bit_identically(
    gs_killed: str, data_run: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tiny_train_config()  # 4 epochs, a checkpoint every epoch, keep_last_n 2
    reference = copy_run(data_run, tmp_path / "reference")  # the same data, trained without interruption
    stages.train_seed(str(reference), cfg, 7)

    _gcs_env(monkeypatch, tmp_path / "gpu-a")
    uri = copy_gs_run(gs_killed, _new_run_uri())  # seed 7 killed on a worker after epoch 3
    run = RunDir(uri)
    assert [e for e, _ in recorded_checkpoints(run, 7)] == [2, 3]  # recorded as written, pruned to keep_last_n
    manifest = run.read_manifest().artifacts
    assert {"seeds/seed_7/metrics.jsonl", "seeds/seed_7/best_deployment.pth"} <= set(manifest)
    assert "seeds/seed_7/resume_epoch_0001.pth" not in manifest
    assert not run._gcs.exists("seeds/seed_7/resume_epoch_0001.pth"), "pruned in the bucket as locally"

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gpu-b"))  # the retry lands on a fresh worker
    mirror = RunDir(uri).root
    assert not mirror.exists()
    epochs: list[int] = []
    result = stages.train_seed(uri, cfg, 7, on_epoch_end=lambda e, row: epochs.append(e))
    assert epochs == [4], "resumed from the recorded epoch 3, not from epoch 1"
    assert result.result.epochs_run == 4
    seed_dir = mirror / RunLayout.SEED_DIR.at(seed=7)
    ref_dir = reference / RunLayout.SEED_DIR.at(seed=7)
    assert _tensors(seed_dir / "best_deployment.pth") == _tensors(ref_dir / "best_deployment.pth")
    rows = [json.loads(r)["epoch"] for r in (seed_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3, 4]

    attempts = read_attempts(RunDir(uri), 7).attempts
    assert [(a.attempt, a.resumed_from_epoch, a.last_epoch, a.status) for a in attempts] == [
        (1, 0, 3, "interrupted"),
        (2, 3, 4, "completed"),
    ]
    assert result.attempts is not None and len(result.attempts.attempts) == 2
    assert "resumed from epoch 3; epochs 4-4; completed" in result.attempts.describe()


def test_a_damaged_recorded_checkpoint_falls_back_to_the_previous_one(
    gs_data_run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from rtscore.stages.spec import record
    from rtscore.stages.train import SPEC
    from rtscore.train.records import stage_checkpoint

    cfg = tiny_train_config()
    uri = gs_data_run
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gpu-a"))
    run = RunDir(uri)
    seed_dir = run.at(RunLayout.SEED_DIR, seed=3)
    for epoch in (1, 2):  # two recorded checkpoints (what the loop writes, minus the training)
        ckpt.save_resume(seed_dir, {"epoch": epoch, "weights": torch.zeros(4)}, epoch, keep_last_n=3)
        record(SPEC, run, RunLayout.RESUME_EPOCH.at(seed=3, epoch=epoch), cfg)
    rel = RunLayout.RESUME_EPOCH.at(seed=3, epoch=2)
    damaged = tmp_path / "damaged.pth"
    damaged.write_bytes(run.path(rel).read_bytes())
    flip_byte(damaged, keep_mtime=False)
    run._gcs.bucket.blob(run._gcs.name(rel)).upload_from_filename(str(damaged))  # bit rot in the bucket

    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gpu-b"))
    fresh = RunDir(uri)
    with caplog.at_level("WARNING"):
        assert stage_checkpoint(fresh, 3) == 1
    assert "resume_epoch_0002.pth" in caplog.text and "does not match the manifest" in caplog.text
    assert load_checkpoint(fresh.at(RunLayout.RESUME_LATEST, seed=3))["epoch"] == 1

    run._gcs.delete([RunLayout.RESUME_EPOCH.at(seed=3, epoch=1)])  # nothing stageable left: a clear error
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gpu-c"))
    with pytest.raises(StorageError, match=r"seed 3: no recorded resume checkpoint can be staged.*--fresh"):
        stage_checkpoint(RunDir(uri), 3)


def test_fresh_forgets_what_the_seed_recorded(tmp_path: Path, data_run: Path) -> None:
    from rtscore.stages.spec import record
    from rtscore.stages.train import SPEC
    from rtscore.train.records import forget_seed

    cfg = tiny_train_config()
    run_dir = copy_run(data_run, tmp_path / "run")
    run = RunDir(run_dir)
    seed_dir = run.at(RunLayout.SEED_DIR, seed=5)
    ckpt.save_resume(seed_dir, {"epoch": 1}, 1, keep_last_n=3)
    record(SPEC, run, RunLayout.RESUME_EPOCH.at(seed=5, epoch=1), cfg)
    ckpt.save_best(seed_dir, {"w": torch.ones(2)})
    record(SPEC, run, RunLayout.BEST_WEIGHTS.at(seed=5), cfg)
    forget_seed(run, 5)
    assert not any(rel.startswith("seeds/seed_5/") for rel in run.read_manifest().artifacts)
    assert not run.at(RunLayout.BEST_WEIGHTS, seed=5).exists()


@pytest.mark.slow
def test_a_checkpoint_recorded_by_other_code_is_set_aside_on_a_fresh_worker_not_resumed(
    gs_killed: str,
    edits: CodeEdits,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 21 on a gs:// run: the retry lands on a fresh worker that runs edited code. The recorded checkpoint
    is staged, found to be of another identity, set aside in the worker's mirror, and its records leave the
    manifest and the bucket; the seed trains from scratch and only the new checkpoints are recorded."""
    cfg = tiny_train_config()
    _gcs_env(monkeypatch, tmp_path / "gpu-a")
    uri = copy_gs_run(gs_killed, _new_run_uri())  # seed 7 killed on a worker after epoch 3
    assert [e for e, _ in recorded_checkpoints(RunDir(uri), 7)] == [2, 3]

    edits.edit("rtscore/losses/focal.py")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "gpu-b"))
    epochs: list[int] = []
    with caplog.at_level("WARNING", logger="rtscore"):
        stages.train_seed(uri, cfg, 7, on_epoch_end=lambda e, row: epochs.append(e))
    assert epochs == [1, 2, 3, 4], "trained from scratch, not from the recorded epoch 3"
    seed_dir = RunDir(uri).root / RunLayout.SEED_DIR.at(seed=7)
    (aside,) = (seed_dir / "set_aside").iterdir()
    assert (aside / "resume_latest.pth").is_file() and (aside / "best_deployment.pth").is_file()
    assert any(f"set aside in {aside}" in r.getMessage() for r in caplog.records)
    run = RunDir(uri)
    assert [e for e, _ in recorded_checkpoints(run, 7)] == [3, 4]
    attempts = read_attempts(run, 7).attempts
    assert [(a.resumed_from_epoch, a.status) for a in attempts] == [(0, "interrupted"), (0, "completed")]
