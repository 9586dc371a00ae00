"""gs:// run directories against the in-process GCS emulator, with fault injection where it falls short.

The emulator ignores generation preconditions: ``preconditions`` makes it honour them for the manifest
writes, and ``flaky`` injects 503s, timeouts and connection errors at the HTTP transport of the client.
"""

from __future__ import annotations

import itertools
import json
import os
import pickle
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from rtscore.storage import CACHE_ENV, RunDir, RunLayout, StorageError, atomic_write_text, fingerprint
from rtscore.storage.gcs import RetryPolicy, make_client, parse_gs_uri, redact, reset_clients, shared_client
from tests.conftest import GCS_TEST_BUCKET
from tests.helpers import flip_byte

FAST = RetryPolicy(deadline_s=5.0, initial_s=0.001, max_s=0.005, conflict_attempts=10)


@pytest.fixture
def gcs_env(gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh prefix in the emulator's bucket; mirrors under tmp_path; few workers (the emulator is serial)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("RTS_GCS_WORKERS", "4")
    return f"gs://{GCS_TEST_BUCKET}/{uuid.uuid4().hex[:12]}/run"


@pytest.fixture
def run(gcs_env: str, tmp_path: Path) -> RunDir:
    return RunDir(gcs_env, cache_dir=tmp_path / "worker-a", retry=FAST)


def worker(uri: str, tmp_path: Path, name: str = "worker-b") -> RunDir:
    """Another worker of the same run: same bucket prefix, its own (empty) local mirror."""
    return RunDir(uri, cache_dir=tmp_path / name, retry=FAST)


def bucket() -> Any:
    return make_client().bucket(GCS_TEST_BUCKET)


def object_names(run: RunDir, rel: str = "") -> list[str]:
    _, prefix = parse_gs_uri(run.uri)
    base = f"{prefix}/{rel}" if rel else f"{prefix}/"
    return sorted(b.name[len(prefix) + 1 :] for b in make_client().list_blobs(GCS_TEST_BUCKET, prefix=base))


def object_name(run: RunDir, rel: str) -> str:
    return f"{parse_gs_uri(run.uri)[1]}/{rel}"


def bucket_manifest(run: RunDir) -> dict[str, Any]:
    return json.loads(bucket().blob(object_name(run, "manifest.json")).download_as_bytes())


def write_store(root: Path, n: int = 12) -> None:
    """A Zarr-like directory: metadata plus nested chunk files."""
    (root / "images" / "c").mkdir(parents=True)
    (root / "zarr.json").write_text('{"zarr_format": 3}')
    (root / "images" / "zarr.json").write_text('{"shape": [12]}')
    for i in range(n):
        (root / "images" / "c" / str(i)).write_bytes(bytes([i]) * (100 + i))


# --------------------------------------------------------------------------- round trips
def test_file_round_trip(run: RunDir, tmp_path: Path) -> None:
    assert (
        run.remote
        and run.uri.startswith("gs://rts-test/")
        and run.root == tmp_path / "worker-a" / "gcs" / (run.uri.removeprefix("gs://"))
    )
    atomic_write_text(run.path("normalization_stats.json"), '{"mean": [1, 2]}')
    entry = run.record("normalization_stats.json", "normalization-stats", "cfg1")
    assert entry.kind == "file" and entry.uri == f"{run.uri}/normalization_stats.json"
    assert bucket().blob(object_name(run, "normalization_stats.json")).download_as_bytes() == b'{"mean": [1, 2]}'
    assert bucket_manifest(run)["artifacts"]["normalization_stats.json"]["uri"] == entry.uri

    other = worker(run.uri, tmp_path)
    assert not other.path("normalization_stats.json").exists() and other.has("normalization_stats.json")
    assert other.require("normalization_stats.json") == entry
    assert other.at(RunLayout.NORMALIZATION_STATS).read_text() == '{"mean": [1, 2]}'
    assert other.verify("normalization_stats.json") == entry
    assert not other.has("missing.json")


def test_directory_round_trip_uploads_one_object_per_file(run: RunDir, tmp_path: Path) -> None:
    write_store(run.at(RunLayout.DATASET, split="train"))
    entry = run.record("datasets/train.zarr", "generate-dataset", "h")
    assert entry.kind == "dir" and (entry.sha256, entry.bytes) == fingerprint(run.at(RunLayout.DATASET, split="train"))
    names = object_names(run, "datasets/train.zarr/")
    assert len(names) == 14 and "datasets/train.zarr/images/c/11" in names
    assert object_names(run)[-1] == "manifest.json"

    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == (entry.sha256, entry.bytes)
    assert not list(other.at(RunLayout.DATASET, split="train").parent.glob(".*download*"))  # no staging left behind


def test_a_real_zarr_store_round_trip(run: RunDir, tmp_path: Path) -> None:
    import numpy as np
    import zarr

    from tests.helpers import write_test_store

    write_test_store(run.at(RunLayout.DATASET, split="val"), 10, split="val")
    run.record("datasets/val.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    other.require("datasets/val.zarr")
    a, b = (
        zarr.open_group(str(run.at(RunLayout.DATASET, split="val")), mode="r"),
        zarr.open_group(str(other.at(RunLayout.DATASET, split="val")), mode="r"),
    )
    assert np.array_equal(a["pixels"][:], b["pixels"][:]) and dict(a.attrs) == dict(b.attrs)


def test_require_skips_a_verified_local_copy_and_replaces_a_different_one(
    run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    (other.at(RunLayout.DATASET, split="train") / "images" / "c" / "3").write_bytes(b"edited locally")
    (other.at(RunLayout.DATASET, split="train") / "stray").write_bytes(b"x")
    other.require("datasets/train.zarr")  # differs from the record: downloaded again
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == fingerprint(
        run.at(RunLayout.DATASET, split="train")
    )

    from rtscore.storage.gcs import GcsStore

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a verified local copy must not be downloaded again")

    monkeypatch.setattr(GcsStore, "download_many", no_download)
    other.require("datasets/train.zarr")
    run.require("datasets/train.zarr")  # the writer's own mirror is already verified


def test_rerecord_uploads_only_changes_and_removes_stale_objects(
    run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rtscore.storage.gcs import GcsStore

    store = run.path("calibration/seed_1/logit_cache.zarr")
    write_store(store)
    run.record("calibration/seed_1/logit_cache.zarr", "logit-cache", "h")
    (store / "images" / "c" / "11").unlink()
    (store / "images" / "c" / "0").write_bytes(b"new")
    uploaded: list[str] = []
    real = GcsStore.upload_many

    def spy(self: GcsStore, items: Any) -> None:
        uploaded.extend(rel for _, rel, *_ in items)
        real(self, items)

    monkeypatch.setattr(GcsStore, "upload_many", spy)
    entry = run.record("calibration/seed_1/logit_cache.zarr", "logit-cache", "h2")
    assert uploaded == ["calibration/seed_1/logit_cache.zarr/images/c/0"]
    assert len(object_names(run, "calibration/seed_1/logit_cache.zarr/")) == 13
    other = worker(run.uri, tmp_path)
    other.require("calibration/seed_1/logit_cache.zarr")
    assert fingerprint(other.path("calibration/seed_1/logit_cache.zarr")) == (entry.sha256, entry.bytes)


def test_forget_drops_the_record_and_has_checks_the_objects(run: RunDir) -> None:
    atomic_write_text(run.path("a.json"), "1")
    write_store(run.path("validation"))
    run.record("a.json", "s", "c")
    run.record("validation", "validate-data", "c")
    assert run.has("a.json") and run.has("validation")
    run.forget("a.json")
    run.forget("a.json")  # forgetting twice is fine
    assert run.entry("a.json") is None and not run.has("a.json") and run.has("validation")
    assert "a.json" in object_names(run)  # objects stay until the next record overwrites them
    for name in object_names(run, "validation/"):
        bucket().blob(object_name(run, name)).delete()
    assert run.entry("validation") is not None and not run.has("validation")


def test_missing_input_names_its_uri(run: RunDir) -> None:
    with pytest.raises(StorageError, match=r"input artifact gs://rts-test/.*/run/datasets/train.zarr is missing"):
        run.require("datasets/train.zarr")
    assert run.fetch("datasets/train.zarr") is None


# --------------------------------------------------------------------------- integrity
def test_corrupt_objects_are_named(run: RunDir, tmp_path: Path) -> None:
    atomic_write_text(run.path("seeds/summary.json"), '{"seeds": []}')
    write_store(run.at(RunLayout.DATASET, split="test"))
    run.record("seeds/summary.json", "multi-seed-train", "c")
    run.record("datasets/test.zarr", "generate-dataset", "c")
    bucket().blob(object_name(run, "seeds/summary.json")).upload_from_string(b'{"seeds": [1]}')
    bucket().blob(object_name(run, "datasets/test.zarr/images/c/5")).upload_from_string(b"garbage")

    other = worker(run.uri, tmp_path)
    with pytest.raises(StorageError, match=r"object gs://.*/run/seeds/summary.json does not match the manifest"):
        other.require("seeds/summary.json")
    with pytest.raises(StorageError, match=r"test.zarr does not match .*not as uploaded: gs://rts-test/.*/c/5\)"):
        other.require("datasets/test.zarr")
    assert not other.path("seeds/summary.json").exists() and not other.at(RunLayout.DATASET, split="test").exists()
    assert not [p for p in other.root.rglob("*") if "download" in p.name]

    bucket().blob(object_name(run, "datasets/test.zarr/images/c/5")).delete()  # now one object short
    with pytest.raises(StorageError, match="not the recorded set"):
        other.require("datasets/test.zarr")


def test_recorded_object_missing_from_the_bucket(run: RunDir, tmp_path: Path) -> None:
    atomic_write_text(run.path("a.json"), "1")
    run.record("a.json", "s", "c")
    bucket().blob(object_name(run, "a.json")).delete()
    with pytest.raises(StorageError, match=r"object gs://.*/a.json is recorded in the manifest but missing"):
        worker(run.uri, tmp_path).require("a.json")


def test_upload_failure_midway_leaves_no_manifest_entry(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.api_core.exceptions import Forbidden
    from google.cloud.storage import Blob

    atomic_write_text(run.path("config.resolved.yaml"), "a: 1\n")
    run.record("config.resolved.yaml", "config", "c")
    write_store(run.at(RunLayout.DATASET, split="train"))
    real = Blob._handle_filename_and_upload
    calls = itertools.count()

    def fail_one(self: Blob, *args: Any, **kwargs: Any) -> Any:
        if self.name.endswith("images/c/7"):
            raise Forbidden("injected: no write permission")
        next(calls)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "_handle_filename_and_upload", fail_one)
    with pytest.raises(StorageError, match=r"upload of gs://.*/run/datasets/train.zarr/images/c/7 failed: Forbidden"):
        run.record("datasets/train.zarr", "generate-dataset", "h")
    assert next(calls) > 1  # other objects were uploaded before the failure surfaced
    assert set(bucket_manifest(run)["artifacts"]) == {"config.resolved.yaml"}
    assert run.entry("datasets/train.zarr") is None and not run.has("datasets/train.zarr")


def test_manifest_is_written_after_every_object(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.cloud.storage import Blob

    order: list[str] = []
    lock = threading.Lock()
    up_file, up_str = Blob._handle_filename_and_upload, Blob.upload_from_string

    def log_file(self: Blob, *args: Any, **kwargs: Any) -> Any:
        out = up_file(self, *args, **kwargs)
        with lock:
            order.append(self.name)
        return out

    def log_str(self: Blob, *args: Any, **kwargs: Any) -> Any:
        with lock:
            order.append(self.name)
        return up_str(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "_handle_filename_and_upload", log_file)
    monkeypatch.setattr(Blob, "upload_from_string", log_str)
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "h")
    assert len(order) == 15 and order[-1].endswith("/manifest.json")


# --------------------------------------------------------------------------- transient errors
class Flaky:
    """Fails every ``every``-th object request of the GCS client with the next of ``faults``.

    The client's background fetches of bucket metadata are left alone (and not counted).
    """

    def __init__(self, every: int, faults: list[Callable[[str, str], Any]]) -> None:
        self.every, self.faults = every, itertools.cycle(faults)
        self.calls = self.injected = 0
        self.lock = threading.Lock()

    def decide(self, method: str, url: str) -> Callable[[str, str], Any] | None:
        if urlsplit(url).path.rstrip("/").endswith(f"/b/{GCS_TEST_BUCKET}"):
            return None
        with self.lock:
            self.calls += 1
            if self.calls % self.every:
                return None
            self.injected += 1
            return next(self.faults)


def status(code: int) -> Callable[[str, str], requests.Response]:
    def make(method: str, url: str) -> requests.Response:
        r = requests.Response()
        r.status_code = code
        r._content = json.dumps({"error": {"code": code, "message": f"injected {code}"}}).encode()
        r.headers["Content-Type"] = "application/json"
        r.url = url
        r.request = requests.Request(method, url).prepare()
        return r

    return make


def raise_(err: Exception) -> Callable[[str, str], Any]:
    def make(method: str, url: str) -> Any:
        raise err

    return make


@pytest.fixture
def flaky(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Flaky], Flaky]]:
    """Install a :class:`Flaky` at the HTTP transport of every GCS client."""
    from google.auth.transport.requests import AuthorizedSession

    real = AuthorizedSession.request

    def install(f: Flaky) -> Flaky:
        def request(self: AuthorizedSession, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
            fault = f.decide(method, url)
            return fault(method, url) if fault is not None else real(self, method, url, *args, **kwargs)

        monkeypatch.setattr(AuthorizedSession, "request", request)
        return f

    yield install


def test_transient_errors_are_retried(run: RunDir, tmp_path: Path, flaky: Callable[[Flaky], Flaky]) -> None:
    atomic_write_text(run.path("a.json"), '{"a": 1}')
    write_store(run.at(RunLayout.DATASET, split="train"))
    f = flaky(
        Flaky(
            3,
            [
                status(503),
                raise_(requests.exceptions.ReadTimeout("injected read timeout")),
                status(429),
                raise_(requests.exceptions.ConnectionError("injected reset")),
                status(500),
                status(502),
                status(504),
            ],
        )
    )
    run.record("a.json", "s", "c")
    entry = run.record("datasets/train.zarr", "generate-dataset", "h")
    run.forget("a.json")
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    assert other.has("datasets/train.zarr") and other.entry("a.json") is None
    assert f.injected >= 10
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == (entry.sha256, entry.bytes)


def test_persistent_transient_errors_give_up(gcs_env: str, tmp_path: Path, flaky: Callable[[Flaky], Flaky]) -> None:
    run = RunDir(gcs_env, cache_dir=tmp_path / "w", retry=RetryPolicy(deadline_s=0.2, initial_s=0.01, max_s=0.02))
    atomic_write_text(run.path("a.json"), "1")
    f = flaky(Flaky(1, [status(503)]))
    with pytest.raises(
        StorageError, match=r"stat of gs://rts-test/.* failed after retrying for 0.2 s .*: ServiceUnavailable"
    ):
        run.record("a.json", "s", "c")
    assert f.calls > 3  # retried by the library until its deadline


@pytest.mark.parametrize(("code", "name"), [(403, "Forbidden"), (401, "Unauthorized"), (400, "BadRequest")])
def test_other_errors_are_not_retried(run: RunDir, flaky: Callable[[Flaky], Flaky], code: int, name: str) -> None:
    atomic_write_text(run.path("a.json"), "1")
    f = flaky(Flaky(1, [status(code)]))
    with pytest.raises(StorageError, match=rf"stat of gs://rts-test/.*/run/manifest.json failed: {name}"):
        run.record("a.json", "s", "c")
    assert f.calls == 1


def test_not_found_is_an_answer_not_retried(run: RunDir, flaky: Callable[[Flaky], Flaky]) -> None:
    f = flaky(Flaky(1, [status(404)]))
    assert run.read_manifest().artifacts == {}  # a 404 on the manifest: there is none yet
    assert f.calls == 1


@pytest.fixture
def library_retries(monkeypatch: pytest.MonkeyPatch) -> list[BaseException]:
    """The errors google-api-core's retry loop (``retry_target``, run by ``Retry``) was handed to retry."""
    from google.api_core.retry import retry_unary

    seen: list[BaseException] = []
    real = retry_unary.retry_target

    def spy(target: Any, predicate: Any, *args: Any, **kwargs: Any) -> Any:
        def watched(err: Exception) -> bool:
            seen.append(err)
            return bool(predicate(err))

        return real(target, watched, *args, **kwargs)

    monkeypatch.setattr(retry_unary, "retry_target", spy)
    return seen


def test_a_transient_503_is_retried_by_the_client_library(
    run: RunDir, tmp_path: Path, flaky: Callable[[Flaky], Flaky], library_retries: list[BaseException]
) -> None:
    """Issue 13.5: no hand loop; the library's Retry (built from RetryPolicy) retries the 503s, a 403 it does not."""
    from google.api_core.exceptions import Forbidden, ServiceUnavailable

    from rtscore.storage.gcs import is_transient

    atomic_write_text(run.path("a.json"), '{"a": 1}')
    write_store(run.at(RunLayout.DATASET, split="train"))
    f = flaky(Flaky(2, [status(503)]))
    run.record("a.json", "s", "c")
    entry = run.record("datasets/train.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == (entry.sha256, entry.bytes)
    transient = [e for e in library_retries if is_transient(e)]  # the 503s: JSON API errors and media responses
    assert f.injected >= 10 and len(transient) == f.injected  # every injected 503 went through the library
    assert any(isinstance(e, ServiceUnavailable) for e in transient)  # JSON API calls (stat, list, manifest)
    assert any(not isinstance(e, ServiceUnavailable) for e in transient)  # uploads and downloads (media)

    library_retries.clear()
    f = flaky(Flaky(1, [status(403)]))
    with pytest.raises(StorageError, match="failed: Forbidden"):
        other.require("a.json")
    assert f.calls == 1 and [type(e) for e in library_retries] == [Forbidden]  # seen, judged permanent


def test_a_checksum_mismatch_in_transit_downloads_again_from_the_start(
    run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The library resumes a retried download at the bytes received; bytes that arrived wrong need a new one."""
    from google.cloud.storage import Blob
    from google.cloud.storage.exceptions import DataCorruption

    write_store(run.at(RunLayout.DATASET, split="train"))
    entry = run.record("datasets/train.zarr", "generate-dataset", "h")
    real = Blob.download_to_filename
    tries: dict[str, int] = {}

    def corrupt_first(self: Blob, filename: str, *args: Any, **kwargs: Any) -> Any:
        tries[self.name] = tries.get(self.name, 0) + 1
        if tries[self.name] == 1:
            Path(filename).write_bytes(b"arrived wrong")
            raise DataCorruption(None, "injected crc32c mismatch")
        return real(self, filename, *args, **kwargs)

    monkeypatch.setattr(Blob, "download_to_filename", corrupt_first)
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == (entry.sha256, entry.bytes)
    assert len(tries) == 14 and set(tries.values()) == {2}


def test_calls_carry_the_configured_library_retry_and_uploads_a_precondition(
    gcs_env: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.retry import Retry
    from google.cloud.storage import Blob, Bucket
    from google.cloud.storage.retry import ConditionalRetryPolicy

    policy = RetryPolicy(deadline_s=17.0, initial_s=0.01, max_s=0.5, multiplier=3.0)
    run = RunDir(gcs_env, cache_dir=tmp_path / "w", retry=policy)
    calls: list[tuple[str, dict[str, Any]]] = []

    def spy(cls: Any, name: str) -> None:
        real = getattr(cls, name)

        def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append((name, kwargs))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, wrapped)

    for cls, name in [
        (Bucket, "get_blob"),
        (Blob, "upload_from_string"),
        (Blob, "upload_from_filename"),
        (Blob, "download_as_bytes"),
        (Blob, "download_to_filename"),
    ]:
        spy(cls, name)
    atomic_write_text(run.path("a.json"), "1")
    run.record("a.json", "s", "c")
    atomic_write_text(run.path("a.json"), "2")
    run.record("a.json", "s", "c2")  # overwrites the object: guarded by the generation it replaces
    RunDir(gcs_env, cache_dir=tmp_path / "w2", retry=policy).require("a.json")
    assert {n for n, _ in calls} == {
        "get_blob",
        "upload_from_string",
        "upload_from_filename",
        "download_as_bytes",
        "download_to_filename",
    }
    for name, kwargs in calls:
        retry = kwargs["retry"]
        if name.startswith("upload"):
            assert isinstance(retry, ConditionalRetryPolicy) and isinstance(kwargs["if_generation_match"], int)
            retry = retry.retry_policy
        assert isinstance(retry, Retry) and retry.timeout == 17.0 and retry._multiplier == 3.0, name
    uploads = [kw["if_generation_match"] for n, kw in calls if n == "upload_from_filename"]
    assert uploads[0] == 0 and uploads[1] > 0  # created only if absent, then replaced only at that generation


def test_an_artifact_object_changed_by_another_writer_is_not_clobbered(
    run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud.storage import Blob

    atomic_write_text(run.path("a.json"), "mine")
    real = Blob.upload_from_filename
    other_content = [True]

    def rejected(self: Blob, *args: Any, if_generation_match: int | None = None, **kwargs: Any) -> Any:
        if other_content[0]:  # another writer put different content there first: the emulator ignores 412s
            self.bucket.blob(self.name).upload_from_string(b"theirs")
            raise PreconditionFailed("injected 412")
        real(self, *args, if_generation_match=if_generation_match, **kwargs)  # our own try landed...
        raise PreconditionFailed("injected 412 on the retry")  # ...and its retry found the object changed

    monkeypatch.setattr(Blob, "upload_from_filename", rejected)
    with pytest.raises(StorageError, match=r"upload of gs://.*/a.json refused: the object changed"):
        run.record("a.json", "s", "c")
    assert bucket().blob(object_name(run, "a.json")).download_as_bytes() == b"theirs"
    assert run.entry("a.json") is None
    other_content[0] = False
    run.record("a.json", "s", "c")  # a 412 whose object holds our content is our own earlier try: fine
    assert bucket().blob(object_name(run, "a.json")).download_as_bytes() == b"mine"


def test_retry_policy_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from google.api_core.retry import Retry
    from google.cloud.storage.retry import ConditionalRetryPolicy

    monkeypatch.setenv("RTS_GCS_RETRY_DEADLINE_S", "42")
    monkeypatch.setenv("RTS_GCS_RETRY_INITIAL_S", "0.25")
    monkeypatch.setenv("RTS_GCS_RETRY_MAX_S", "8")
    monkeypatch.setenv("RTS_GCS_RETRY_MULTIPLIER", "3")
    policy = RetryPolicy.from_env()
    assert (policy.deadline_s, policy.initial_s, policy.max_s, policy.multiplier) == (42, 0.25, 8, 3)
    retry = policy.retry()
    assert isinstance(retry, Retry) and retry.timeout == 42
    assert (retry._initial, retry._maximum, retry._multiplier) == (0.25, 8, 3)
    conditional = policy.conditional()
    assert isinstance(conditional, ConditionalRetryPolicy) and conditional.retry_policy.timeout == 42
    assert conditional.get_retry_policy_if_conditions_met(query_params={"ifGenerationMatch": 0}) is not None
    assert conditional.get_retry_policy_if_conditions_met(query_params={}) is None  # an unguarded write
    assert all(0.125 <= policy.delay(0) <= 0.25 for _ in range(20)) and policy.delay(20) <= policy.max_s
    monkeypatch.setenv("RTS_GCS_RETRY_DEADLINE_S", "soon")
    with pytest.raises(StorageError, match="RTS_GCS_RETRY_DEADLINE_S must be a number"):
        RetryPolicy.from_env()
    monkeypatch.setenv("RTS_GCS_RETRY_DEADLINE_S", "0")
    with pytest.raises(StorageError, match="RTS_GCS_RETRY_.*deadline"):
        RetryPolicy.from_env()
    monkeypatch.delenv("RTS_GCS_RETRY_DEADLINE_S")
    monkeypatch.setenv("RTS_GCS_RETRY_ATTEMPTS", "3")  # the old knob: not silently ignored
    with pytest.raises(StorageError, match="RTS_GCS_RETRY_ATTEMPTS is no longer read.*RTS_GCS_RETRY_DEADLINE_S"):
        RetryPolicy.from_env()


# --------------------------------------------------------------------------- manifest concurrency
class Preconditions:
    """Make the emulator honour ``if_generation_match`` on ``upload_from_string`` (it ignores it).

    ``before_write`` runs once, just before the first conditional write is checked: a concurrent writer.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.conditions: list[int | None] = []
        self.rejected = 0
        self.before_write: Callable[[], None] | None = None


@pytest.fixture
def preconditions(monkeypatch: pytest.MonkeyPatch) -> Preconditions:
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud.storage import Blob

    p = Preconditions()
    real = Blob.upload_from_string

    def upload(self: Blob, data: Any, *args: Any, if_generation_match: int | None = None, **kwargs: Any) -> Any:
        hook, p.before_write = p.before_write, None
        if hook is not None:
            hook()
        with p.lock:
            p.conditions.append(if_generation_match)
            if if_generation_match is not None:
                current = self.bucket.get_blob(self.name)
                if (int(current.generation) if current is not None else 0) != if_generation_match:
                    p.rejected += 1
                    raise PreconditionFailed(f"injected 412: {self.name} generation changed")
            return real(self, data, *args, if_generation_match=if_generation_match, **kwargs)

    monkeypatch.setattr(Blob, "upload_from_string", upload)
    return p


def test_manifest_create_is_conditional_and_412_rereads(
    run: RunDir, tmp_path: Path, preconditions: Preconditions
) -> None:
    other = worker(run.uri, tmp_path)
    atomic_write_text(run.path("a.json"), "a")
    atomic_write_text(other.path("b.json"), "b")
    # b is recorded between a's manifest read and a's manifest write: a's create-only write must fail (412),
    # re-read the manifest that now holds b, and add a to it.
    preconditions.before_write = lambda: other.record("b.json", "s", "c")
    run.record("a.json", "s", "c")
    first, rejected, retried = preconditions.conditions  # b's create, a's create (412), a's update
    assert first == rejected == 0 and retried is not None and retried > 0
    assert preconditions.rejected == 1
    assert set(bucket_manifest(run)["artifacts"]) == {"a.json", "b.json"}


def test_concurrent_workers_lose_no_record(gcs_env: str, tmp_path: Path, preconditions: Preconditions) -> None:
    runs = [worker(gcs_env, tmp_path, f"w{i}") for i in range(4)]
    errors: list[BaseException] = []

    def work(i: int, r: RunDir) -> None:
        try:
            for j in range(3):
                atomic_write_text(r.path(f"seeds/seed_{i}/f{j}.json"), f"{i}{j}")
                r.record(f"seeds/seed_{i}/f{j}.json", "train-seed", "c")
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=work, args=(i, r)) for i, r in enumerate(runs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(runs[0].read_manifest().artifacts) == 12


def test_endless_conflicts_give_up(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.api_core.exceptions import PreconditionFailed
    from google.cloud.storage import Blob

    def always_412(self: Blob, *args: Any, **kwargs: Any) -> None:
        raise PreconditionFailed("injected 412")

    monkeypatch.setattr(Blob, "upload_from_string", always_412)
    atomic_write_text(run.path("a.json"), "1")
    with pytest.raises(StorageError, match="kept changing under concurrent writers; gave up after 10 attempts"):
        run.record("a.json", "s", "c")


# --------------------------------------------------------------------------- credentials, pickling, config
SECRET = "ya29.a0SECRET-token-value"


def test_credentials_never_leak(run: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from google.api_core.exceptions import Forbidden
    from google.cloud import storage
    from google.cloud.storage import Blob
    from google.oauth2.credentials import Credentials

    import rtscore.storage.gcs

    client = storage.Client(credentials=Credentials(token=SECRET), project="p")
    monkeypatch.setattr(rtscore.storage.gcs, "make_client", lambda: client)
    monkeypatch.setattr(rtscore.storage.gcs, "_clients", {})  # this test's client only, not the process's
    secret_run = worker(run.uri, tmp_path)
    atomic_write_text(secret_run.path("a.json"), "1")
    secret_run.record("a.json", "s", "c")  # the client (and its token) is in use now
    assert secret_run._gcs._client is client

    assert SECRET not in repr(secret_run) and repr(secret_run) == f"RunDir({run.uri!r})"
    blob = pickle.dumps(secret_run)
    assert SECRET.encode() not in blob and b"Credentials" not in blob
    manifest = json.dumps(bucket_manifest(secret_run))
    assert SECRET not in manifest
    assert all(e["uri"].startswith("gs://") for e in bucket_manifest(secret_run)["artifacts"].values())

    def leaky(self: Blob, *args: Any, **kwargs: Any) -> None:
        raise Forbidden(f"denied; headers: Authorization: Bearer {SECRET}; url ...?access_token={SECRET}&x=1")

    monkeypatch.setattr(Blob, "_handle_filename_and_upload", leaky)
    atomic_write_text(secret_run.path("b.json"), "2")
    with pytest.raises(StorageError) as info:
        secret_run.record("b.json", "s", "c")
    assert "upload of gs://" in str(info.value) and "SECRET" not in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_redact() -> None:
    text = (
        f"Bearer {SECRET} token={SECRET}&key=AIzaSy123 "
        '"private_key": "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n" X-Goog-Signature=abc123'
    )
    out = redact(text)
    assert "SECRET" not in out and "AIzaSy123" not in out and "MIIE" not in out and "abc123" not in out


def test_run_dir_pickles_without_a_client(run: RunDir, tmp_path: Path) -> None:
    atomic_write_text(run.path("a.json"), "1")
    run.record("a.json", "s", "c")
    assert run._store is not None
    copy = pickle.loads(pickle.dumps(run))
    assert copy._store is None and copy.uri == run.uri and copy.root == run.root and copy._retry == FAST
    assert copy.entry("a.json") == run.entry("a.json")  # a client is made again on first use


@pytest.mark.parametrize(
    ("content", "reason"),
    [("not json", "is not a valid json file"), ('{"type": "weird"}', "does not have a valid type")],
)
def test_a_broken_credentials_file_is_reported_as_such(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str, reason: str
) -> None:
    """Issue 11.19: a credentials file that exists but does not load is not "no credentials"."""
    creds = tmp_path / "creds.json"
    creds.write_text(content)
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(creds))
    with pytest.raises(StorageError) as err:
        make_client()
    msg = str(err.value)
    assert f"GOOGLE_APPLICATION_CREDENTIALS={creds} cannot be used" in msg and reason in msg
    assert "no Google Cloud credentials found" not in msg


def test_emulator_client_is_anonymous(gcs_emulator: str) -> None:
    from google.auth.credentials import AnonymousCredentials

    assert isinstance(make_client()._credentials, AnonymousCredentials)


def test_uri_parsing_and_cache_location(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    assert RunDir("gs://my-bucket/a/b/").root == tmp_path / "gcs" / "my-bucket" / "a" / "b"
    assert RunDir("gs://my-bucket/a/b/").uri == "gs://my-bucket/a/b"
    assert RunDir("gs://my-bucket").root == tmp_path / "gcs" / "my-bucket"
    assert RunDir("gs://my-bucket/x", cache_dir=tmp_path / "c").root == tmp_path / "c" / "gcs" / "my-bucket" / "x"
    assert RunDir("gs://my-bucket/x").uri_of("a.json") == "gs://my-bucket/x/a.json"
    for bad in ("gs://Bad_Bucket/x", "gs://b/x", "gs://bucket/a/../b", "gs://bucket/a//b"):
        with pytest.raises(StorageError, match="gs://"):
            RunDir(bad)
    local = RunDir(tmp_path / "run")
    assert not local.remote and local.uri == str(tmp_path / "run")


def test_empty_directory_round_trip(run: RunDir, tmp_path: Path) -> None:
    run.path("evaluation").mkdir(parents=True)
    run.record("evaluation", "evaluate-test", "c")
    other = worker(run.uri, tmp_path)
    assert other.has("evaluation")
    other.require("evaluation")
    assert other.path("evaluation").is_dir() and not any(other.path("evaluation").iterdir())


def test_fetch_stages_recorded_inputs_only(run: RunDir, tmp_path: Path) -> None:
    atomic_write_text(run.path("seeds/summary.json"), "{}")
    other = worker(run.uri, tmp_path)
    assert other.fetch("seeds/summary.json") is None and not other.path("seeds/summary.json").exists()
    run.record("seeds/summary.json", "multi-seed-train", "c")
    assert other.fetch("seeds/summary.json") is not None and other.path("seeds/summary.json").read_text() == "{}"
    local = RunDir(tmp_path / "local")
    atomic_write_text(local.path("x.json"), "1")
    local.record("x.json", "s", "c")
    local.path("x.json").unlink()
    assert local.fetch("x.json") is not None  # a local run only reads the record, as stages did before


def test_transient_classification() -> None:
    from google.api_core import exceptions as gexc
    from google.cloud.storage.exceptions import DataCorruption

    from rtscore.storage.gcs import is_transient

    transient = [
        gexc.ServiceUnavailable("x"),
        gexc.TooManyRequests("x"),
        gexc.InternalServerError("x"),
        gexc.BadGateway("x"),
        gexc.GatewayTimeout("x"),
        requests.exceptions.ConnectTimeout("x"),
        requests.exceptions.ConnectionError("x"),
        TimeoutError("x"),
        DataCorruption(None, "crc32c mismatch"),
    ]
    permanent = [gexc.Forbidden("x"), gexc.NotFound("x"), gexc.PreconditionFailed("x"), ValueError("x")]
    assert all(is_transient(e) for e in transient)
    assert not any(is_transient(e) for e in permanent)


# --------------------------------------------------------------------------- verified once per content


def test_require_hashes_a_staged_input_once_per_content(
    run: RunDir, tmp_path: Path, hash_calls: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "h")
    hash_calls.clear()
    run.require("datasets/train.zarr")  # the writer's own mirror: record() just hashed it
    assert hash_calls == []

    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    assert len(hash_calls) == 14  # downloaded and verified: each file hashed once
    hash_calls.clear()
    from rtscore.storage.gcs import GcsStore

    def no_download(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("an unchanged verified copy must not be downloaded again")

    with monkeypatch.context() as m:
        m.setattr(GcsStore, "download_many", no_download)
        for _ in range(3):
            other.require("datasets/train.zarr")
            other.fetch("datasets/train.zarr")
            assert worker(run.uri, tmp_path).require("datasets/train.zarr")  # another RunDir, same mirror
    assert hash_calls == []

    run.path("datasets/train.zarr/images/c/0").write_bytes(b"new content under the same path")
    run.record("datasets/train.zarr", "generate-dataset", "h2")
    other.require("datasets/train.zarr")  # the manifest's sha256 changed: hashed, found stale, replaced
    assert fingerprint(other.at(RunLayout.DATASET, split="train")) == fingerprint(
        run.at(RunLayout.DATASET, split="train")
    )


@pytest.mark.parametrize("keep_mtime", [False, True], ids=["mtime-touched", "mtime-restored"])
def test_require_catches_a_corrupted_staged_file_of_the_same_size(
    run: RunDir, tmp_path: Path, hash_calls: list[Path], keep_mtime: bool
) -> None:
    atomic_write_text(run.path("normalization_stats.json"), '{"mean": [1, 2, 3]}')
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("normalization_stats.json", "normalization-stats", "c")
    run.record("datasets/train.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    for rel, victim in (
        ("normalization_stats.json", "normalization_stats.json"),
        ("datasets/train.zarr", "datasets/train.zarr/images/c/7"),
    ):
        other.require(rel)
        good = other.path(victim).read_bytes()
        flip_byte(other.path(victim), keep_mtime)
        hash_calls.clear()
        other.require(rel)  # caught before use: hashed, found different, downloaded again
        assert hash_calls and other.path(victim).read_bytes() == good
        hash_calls.clear()
        other.require(rel)
        assert hash_calls == []


# --------------------------------------------------------------------------- a repeated require is cheap


@pytest.fixture
def http_requests(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """(method, path) of every HTTP request any GCS client sends."""
    from google.auth.transport.requests import AuthorizedSession

    seen: list[tuple[str, str]] = []
    real = AuthorizedSession.request

    def request(self: AuthorizedSession, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        seen.append((method, urlsplit(url).path))
        return real(self, method, url, *args, **kwargs)

    monkeypatch.setattr(AuthorizedSession, "request", request)
    return seen


def test_a_repeated_require_reuses_the_client_and_makes_one_request(
    run: RunDir, tmp_path: Path, http_requests: list[tuple[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13.3: the next stage's require (a new RunDir in the same process) makes no client and one
    request (the manifest's generation), downloads nothing and hashes nothing."""
    import rtscore.storage.gcs

    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")  # staged and verified: downloads
    made: list[int] = []
    real_make = rtscore.storage.gcs.make_client
    monkeypatch.setattr(rtscore.storage.gcs, "make_client", lambda: made.append(1) or real_make())
    for _ in range(2):
        http_requests.clear()
        nxt = worker(run.uri, tmp_path)
        assert nxt.require("datasets/train.zarr").sha256 == run.entry("datasets/train.zarr").sha256  # type: ignore[union-attr]
        assert nxt._gcs._client is other._gcs._client
    http_requests.clear()
    worker(run.uri, tmp_path).require("datasets/train.zarr")
    assert made == []
    assert len(http_requests) == 1 and http_requests[0][0] == "GET"
    assert "alt=media" not in http_requests[0][1] and "/download/" not in http_requests[0][1]  # a stat, no content


def test_a_manifest_rewritten_elsewhere_is_always_seen(run: RunDir, tmp_path: Path) -> None:
    """The parsed-manifest cache is keyed by the object's generation: a rewrite by any writer (here another
    client writing the object directly) is read at the next call, never a stale record."""
    atomic_write_text(run.path("a.json"), "1")
    run.record("a.json", "s", "c")
    assert run.entry("a.json") is not None and run.entry("a.json") is not None  # cached generation in use
    manifest = bucket_manifest(run)
    manifest["artifacts"]["a.json"]["config_hash"] = "rewritten"
    bucket().blob(object_name(run, "manifest.json")).upload_from_string(json.dumps(manifest))
    assert run.entry("a.json").config_hash == "rewritten"  # type: ignore[union-attr]
    assert worker(run.uri, tmp_path).entry("a.json").config_hash == "rewritten"  # type: ignore[union-attr]
    got = run.read_manifest()
    got.artifacts.clear()  # a caller's copy: changing it does not change what the next read returns
    assert set(run.read_manifest().artifacts) == {"a.json"}
    bucket().blob(object_name(run, "manifest.json")).delete()
    assert run.entry("a.json") is None


def test_the_process_client_is_per_environment_and_thread_safe(
    gcs_emulator: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import rtscore.storage.gcs

    monkeypatch.setattr(rtscore.storage.gcs, "_clients", {})
    made: list[object] = []
    real_make = rtscore.storage.gcs.make_client

    def counting() -> Any:
        made.append(1)
        return real_make()

    monkeypatch.setattr(rtscore.storage.gcs, "make_client", counting)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(shared_client())) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and all(c is got[0] for c in got)
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "another-project")
    assert shared_client() is not got[0] and len(made) == 2  # another project: another client
    monkeypatch.delenv("GOOGLE_CLOUD_PROJECT")
    assert shared_client() is got[0]
    reset_clients()
    assert shared_client() is not got[0]


def test_a_forked_child_makes_its_own_client(run: RunDir, tmp_path: Path) -> None:
    """After fork a child must not reuse its parent's HTTP session: it makes a client of its own, and works."""
    atomic_write_text(run.path("a.json"), "1")
    run.record("a.json", "s", "c")
    parent = shared_client()
    parent._rts_parent = True  # type: ignore[attr-defined]  # the child sees this only on the parent's object
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave without running pytest's teardown
        code = 1
        try:
            mine = shared_client()
            ok = not getattr(mine, "_rts_parent", False)
            ok = ok and worker(run.uri, tmp_path, "child").require("a.json").path == "a.json"
            code = 0 if ok else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == bytes([0])
    assert shared_client() is parent


@pytest.mark.parametrize("change", ["truncate", "append", "touch-only"])
def test_require_checks_a_staged_file_changed_after_a_first_require(
    run: RunDir, tmp_path: Path, hash_calls: list[Path], change: str
) -> None:
    """A staged file truncated, grown or merely touched after a first require is hashed again before use;
    a real change is replaced by the recorded content, a touch costs one hash and is then trusted again."""
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "h")
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")
    victim = other.path("datasets/train.zarr/images/c/3")
    good = victim.read_bytes()
    if change == "truncate":
        victim.write_bytes(good[:10])
    elif change == "append":
        victim.write_bytes(good + b"x")
    else:
        os.utime(victim, ns=(victim.stat().st_atime_ns, victim.stat().st_mtime_ns + 1_000_000_000))
    hash_calls.clear()
    worker(run.uri, tmp_path).require("datasets/train.zarr")
    assert hash_calls and victim.read_bytes() == good
    hash_calls.clear()
    worker(run.uri, tmp_path).require("datasets/train.zarr")
    assert hash_calls == []


# --------------------------------------------------------------------------- adopting another run's artifact
IDENTITY = ("path", "kind", "sha256", "bytes", "stage", "config_hash", "code_hash")


def same_identity(x: object, y: object) -> bool:
    return all(getattr(x, f) == getattr(y, f) for f in IDENTITY)


@pytest.fixture
def baseline(run: RunDir) -> RunDir:
    """A gs:// variant that ran the data stages: a file and a Zarr-like tree recorded (and in its mirror)."""
    atomic_write_text(run.path("normalization_stats.json"), '{"mean": [1, 2]}')
    run.record("normalization_stats.json", "normalization-stats", "cfg-n", code_hash="code-n")
    write_store(run.at(RunLayout.DATASET, split="train"))
    run.record("datasets/train.zarr", "generate-dataset", "cfg-d", code_hash="code-d")
    return run


def sibling(run: RunDir, name: str, tmp_path: Path) -> RunDir:
    """Another variant's gs:// run directory next to ``run``, with the same local mirror base."""
    return RunDir(run.uri.rsplit("/", 1)[0] + f"/{name}", cache_dir=tmp_path / "worker-a", retry=FAST)


@pytest.fixture
def no_uploads(monkeypatch: pytest.MonkeyPatch) -> None:
    from rtscore.storage.gcs import GcsStore

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a gs:// to gs:// adopt copies server-side, it uploads nothing")

    monkeypatch.setattr(GcsStore, "upload_file", refuse)


@pytest.mark.parametrize("rel", ["normalization_stats.json", "datasets/train.zarr"])
def test_adopt_between_gs_runs_copies_server_side(
    baseline: RunDir, rel: str, tmp_path: Path, no_uploads: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.cloud.storage import Blob

    variant = sibling(baseline, "loss-ignore", tmp_path)
    order: list[str] = []
    real_rewrite, real_write = Blob.rewrite, RunDir._write_record

    def log_rewrite(self: Blob, *args: Any, **kwargs: Any) -> Any:
        order.append(self.name)
        return real_rewrite(self, *args, **kwargs)

    def log_record(self: RunDir, entry: Any) -> None:
        order.append("manifest")
        real_write(self, entry)

    monkeypatch.setattr(Blob, "rewrite", log_rewrite)
    monkeypatch.setattr(RunDir, "_write_record", log_record)
    entry = variant.adopt(rel, baseline)
    source = baseline.entry(rel)
    assert source is not None and same_identity(entry, source)
    assert entry.uri == f"{variant.uri}/{rel}" and entry.adopted_from == f"{baseline.uri}/{rel}"
    assert bucket_manifest(variant)["artifacts"][rel]["adopted_from"] == entry.adopted_from
    assert order[-1] == "manifest" and len(order) == (15 if entry.kind == "dir" else 2)  # objects first
    assert [n.removeprefix(f"{rel}") for n in object_names(variant, rel)] == [
        n.removeprefix(f"{rel}") for n in object_names(baseline, rel)
    ]
    other = worker(variant.uri, tmp_path)  # a fresh worker downloads the copied objects and verifies them
    assert other.require(rel) == entry and fingerprint(other.path(rel)) == (source.sha256, source.bytes)
    assert variant.path(rel).exists()  # and the adopting worker's mirror holds a verified copy already
    order.clear()
    assert variant.adopt(rel, baseline) == entry and order == []  # again: nothing copied, nothing written

    monkeypatch.undo()
    import rtscore.storage.files as files

    hashed: list[Path] = []
    real_hash = files.sha256_file
    monkeypatch.setattr(files, "sha256_file", lambda path, *a: hashed.append(path) or real_hash(path, *a))
    sibling(baseline, "aux-slope", tmp_path).adopt(rel, baseline)  # its links move the ctimes of the mirror's files
    assert variant.require(rel) == entry and baseline.require(rel) == source
    assert hashed == []  # the mirrors' copies are recognised as links to the verified files, not hashed again


def test_adopt_a_local_artifact_into_a_gs_run_and_back(run: RunDir, tmp_path: Path) -> None:
    """Local to gs://: uploaded from the verified copy; gs:// to local: linked from the verified mirror."""
    local = RunDir(tmp_path / "local" / "baseline")
    write_store(local.path("datasets/train.zarr"))
    source = local.record("datasets/train.zarr", "generate-dataset", "cfg-d")
    entry = run.adopt("datasets/train.zarr", local)
    assert same_identity(entry, source) and entry.adopted_from == local.uri_of("datasets/train.zarr")
    assert len(object_names(run, "datasets/train.zarr/")) == 14
    other = worker(run.uri, tmp_path)
    other.require("datasets/train.zarr")

    back = RunDir(tmp_path / "local" / "variant")
    entry = back.adopt("datasets/train.zarr", other)
    assert same_identity(entry, source) and entry.adopted_from == f"{run.uri}/datasets/train.zarr"
    mirror, copy = other.path("datasets/train.zarr/zarr.json"), back.path("datasets/train.zarr/zarr.json")
    assert mirror.stat().st_ino == copy.stat().st_ino
    back.verify("datasets/train.zarr")


def test_adopt_uploads_when_the_source_objects_do_not_add_up(
    baseline: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Source objects whose sha256 metadata no longer matches the record (rewritten by another tool): not
    copied server-side, uploaded from the source's verified copy instead, and the copy's objects are right."""
    from google.cloud.storage import Blob

    from rtscore.storage.gcs import GcsStore

    rel = "datasets/train.zarr"
    uploads: list[str] = []
    real_upload = GcsStore.upload_file

    def count(self: GcsStore, path: Path, rel: str, *args: Any, **kwargs: Any) -> None:
        uploads.append(rel)
        real_upload(self, path, rel, *args, **kwargs)

    monkeypatch.setattr(GcsStore, "upload_file", count)
    monkeypatch.setattr(Blob, "rewrite", lambda *a, **k: pytest.fail("copied objects that do not add up"))
    blob = bucket().get_blob(object_name(baseline, f"{rel}/images/c/3"))
    blob.metadata = {"sha256": "0" * 64}
    blob.patch()
    variant = sibling(baseline, "aux-slope", tmp_path)
    entry = variant.adopt(rel, baseline)
    assert same_identity(entry, baseline.entry(rel))
    meta = bucket().get_blob(object_name(variant, f"{rel}/images/c/3")).metadata
    assert meta["sha256"] != "0" * 64 and len(uploads) == 14
    worker(variant.uri, tmp_path).require(rel)


def test_adopt_refuses_a_corrupt_source_and_a_failed_copy_leaves_no_record(
    baseline: RunDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from google.api_core.exceptions import Forbidden
    from google.cloud.storage import Blob

    rel = "datasets/train.zarr"
    with pytest.raises(StorageError, match=rf"cannot adopt validation from run {baseline.uri}: its manifest"):
        sibling(baseline, "v1", tmp_path).adopt("validation", baseline)

    real = Blob.rewrite

    def fail_one(self: Blob, *args: Any, **kwargs: Any) -> Any:
        if self.name.endswith("images/c/7"):
            raise Forbidden("injected: no write permission")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Blob, "rewrite", fail_one)
    failed = sibling(baseline, "v2", tmp_path)
    with pytest.raises(StorageError, match=r"copy of gs://.*/v2/datasets/train.zarr/images/c/7 failed: Forbidden"):
        failed.adopt(rel, baseline)
    assert failed.entry(rel) is None and bucket_manifest_or_empty(failed).get("artifacts", {}) == {}
    monkeypatch.undo()
    assert same_identity(failed.adopt(rel, baseline), baseline.entry(rel))  # adopting again completes it

    remote_source = worker(baseline.uri, tmp_path, "worker-c")  # a fresh mirror: require downloads and checks
    bucket().blob(object_name(baseline, f"{rel}/images/c/5")).upload_from_string(b"tampered")
    variant = sibling(baseline, "v3", tmp_path / "c3")
    with pytest.raises(StorageError, match="does not match the manifest"):
        variant.adopt(rel, remote_source)
    assert variant.entry(rel) is None and object_names(variant, rel) == []


def bucket_manifest_or_empty(run: RunDir) -> dict[str, Any]:
    blob = bucket().get_blob(object_name(run, "manifest.json"))
    return {} if blob is None else json.loads(blob.download_as_bytes())


def test_list_under_an_ending_lists_only_the_names_ending_so_at_any_depth(gcs_env: str) -> None:
    from rtscore.storage.gcs import GcsStore

    _, prefix = parse_gs_uri(gcs_env)
    names = ["scenes/a/a_parts.json", "scenes/a/a_prob.tif", "scenes/b/c/b_parts.json", "scenes_parts.json"]
    for name in names:
        bucket().blob(f"{prefix}/{name}").upload_from_string(b"x")
    store = GcsStore(GCS_TEST_BUCKET, prefix, FAST)
    assert sorted(store.list_under("scenes", ending="_parts.json")) == ["a/a_parts.json", "b/c/b_parts.json"]
    assert sorted(store.list_under("scenes")) == ["a/a_parts.json", "a/a_prob.tif", "b/c/b_parts.json"]
    with pytest.raises(ValueError, match="plain name ending"):
        store.list_under("scenes", ending="*.json")
