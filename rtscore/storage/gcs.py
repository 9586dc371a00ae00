"""Google Cloud Storage backend of `gs://bucket/prefix` run directories: client, retries, parallel transfers.

google-cloud-storage is imported only when a gs:// root is used (`rts --help` stays fast). Nothing here holds
credentials in picklable state, and every error message is passed through :func:`redact`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from rtscore.storage.errors import StorageError

if TYPE_CHECKING:
    from google.cloud.storage import Blob, Bucket, Client

T = TypeVar("T")

GS = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
EMULATOR_PROJECT = "rts-emulator"  # a placeholder: the emulator accepts any project
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
SHA_KEY = "sha256"  # custom object metadata: sha256 of the object's content, set at upload

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_REDACTIONS = (
    (re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S), "<redacted key>"),
    (re.compile(r"(?i)\bBearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer <redacted>"),
    (re.compile(r"\bya29\.[A-Za-z0-9._-]+"), "<redacted token>"),
    (
        re.compile(
            r"(?i)(access_token|refresh_token|id_token|client_secret|private_key|private_key_id|token|key|"
            r"x-goog-signature|x-goog-credential|signature|password)(\"?\s*[=:]\s*\"?)([^&\s\"',}]+)"
        ),
        r"\1\2<redacted>",
    ),
)


def redact(text: str) -> str:
    """``text`` with anything that looks like a credential (tokens, keys, signatures) replaced."""
    for pattern, repl in _REDACTIONS:
        text = pattern.sub(repl, text)
    return text


def parse_gs_uri(uri: str) -> tuple[str, str]:
    """(bucket, prefix) of ``gs://bucket/prefix``; the prefix has no leading or trailing slash."""
    if not uri.startswith(GS):
        raise StorageError(f"not a gs:// URI: {uri!r}")
    bucket, _, prefix = uri.removeprefix(GS).partition("/")
    prefix = prefix.strip("/")
    if not _BUCKET_RE.fullmatch(bucket):
        raise StorageError(f"{uri!r}: {bucket!r} is not a valid bucket name (expected gs://bucket/prefix)")
    parts = prefix.split("/") if prefix else []
    if any(p in ("", ".", "..") for p in parts):
        raise StorageError(f"{uri!r}: the prefix may not contain empty, '.' or '..' segments")
    return bucket, prefix


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient GCS errors and for manifest write conflicts (HTTP 412).

    Defaults come from ``RTS_GCS_RETRY_ATTEMPTS``, ``RTS_GCS_RETRY_INITIAL_S``, ``RTS_GCS_RETRY_MAX_S`` and
    ``RTS_GCS_CONFLICT_ATTEMPTS`` (see :meth:`from_env`).
    """

    attempts: int = 6  # tries per call, the first included
    initial_s: float = 0.5
    max_s: float = 30.0
    multiplier: float = 2.0
    conflict_attempts: int = 20  # read-modify-write rounds of the manifest under concurrent writers

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.conflict_attempts < 1:
            raise ValueError(f"retry attempts must be >= 1; got {self.attempts}, {self.conflict_attempts}")
        if self.initial_s < 0 or self.max_s < 0 or self.multiplier < 1:
            raise ValueError("retry delays must be >= 0 and the multiplier >= 1")

    @classmethod
    def from_env(cls) -> RetryPolicy:
        def get(name: str, default: float) -> float:
            raw = os.environ.get(name)
            if raw is None or raw == "":
                return default
            try:
                return float(raw)
            except ValueError:
                raise StorageError(f"{name} must be a number; got {raw!r}") from None

        d = cls()
        try:
            return cls(
                attempts=int(get("RTS_GCS_RETRY_ATTEMPTS", d.attempts)),
                initial_s=get("RTS_GCS_RETRY_INITIAL_S", d.initial_s),
                max_s=get("RTS_GCS_RETRY_MAX_S", d.max_s),
                conflict_attempts=int(get("RTS_GCS_CONFLICT_ATTEMPTS", d.conflict_attempts)),
            )
        except ValueError as err:  # out of range: name the variables a user sets
            raise StorageError(f"RTS_GCS_RETRY_* / RTS_GCS_CONFLICT_ATTEMPTS: {err}") from None

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try ``attempt`` (0-based): capped exponential with full jitter."""
        cap = min(self.max_s, self.initial_s * self.multiplier**attempt)
        return cap * random.uniform(0.5, 1.0)


def transfer_workers() -> int:
    """Parallel transfers of one directory artifact (``RTS_GCS_WORKERS``, default 8)."""
    raw = os.environ.get("RTS_GCS_WORKERS", "8")
    try:
        n = int(raw)
    except ValueError:
        raise StorageError(f"RTS_GCS_WORKERS must be an integer; got {raw!r}") from None
    return max(1, n)


def is_transient(err: BaseException) -> bool:
    """Worth retrying: 408/429/5xx responses, connection errors and timeouts (requests, api_core, builtins),
    and downloads whose checksum did not match in transit."""
    import requests
    from google.api_core import exceptions as gexc
    from google.auth.exceptions import TransportError
    from google.cloud.storage.exceptions import DataCorruption, InvalidResponse

    if isinstance(err, gexc.GoogleAPICallError):
        return err.code in _TRANSIENT_STATUS
    if isinstance(err, InvalidResponse):  # a media response the library did not map to an api_core error
        return getattr(getattr(err, "response", None), "status_code", None) in _TRANSIENT_STATUS
    if isinstance(err, DataCorruption):  # checksum mismatch in transit: download again
        return True
    if isinstance(err, requests.exceptions.ConnectionError | requests.exceptions.Timeout):
        return True
    if isinstance(err, requests.exceptions.ChunkedEncodingError | TransportError):
        return True
    return isinstance(err, ConnectionError | TimeoutError)


def _is_precondition_failure(err: BaseException) -> bool:
    from google.api_core import exceptions as gexc

    return isinstance(err, gexc.PreconditionFailed)


class ManifestConflict(Exception):
    """The manifest changed between our read and our write (HTTP 412): re-read and try again."""


def make_client() -> Client:
    """``storage.Client()`` with Application Default Credentials, or anonymous against the emulator."""
    from google.cloud import storage

    if os.environ.get(EMULATOR_ENV):
        from google.auth.credentials import AnonymousCredentials

        project = os.environ.get("GOOGLE_CLOUD_PROJECT") or EMULATOR_PROJECT
        return storage.Client(credentials=AnonymousCredentials(), project=project)
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return storage.Client()
    except DefaultCredentialsError as err:
        raise StorageError(credentials_problem(err)) from None


def credentials_problem(err: BaseException) -> str:
    """What is wrong with the credentials, keeping google-auth's own reason (redacted): a credentials file
    that exists but does not load is not "no credentials"."""
    reason = redact("; ".join(str(a) for a in err.args) if err.args else str(err))
    named = os.environ.get(CREDENTIALS_ENV)
    if named:
        return (
            f"the Google Cloud credentials file {CREDENTIALS_ENV}={named} cannot be used: {reason}. Point "
            f"{CREDENTIALS_ENV} at a valid service-account or user credentials JSON, or unset it to use "
            "`gcloud auth application-default login`"
        )
    return (
        f"no usable Google Cloud credentials for a gs:// location ({reason}): run "
        f"`gcloud auth application-default login` or set {CREDENTIALS_ENV} "
        f"(or {EMULATOR_ENV} to use a local emulator)"
    )


class GcsStore:
    """The objects under one ``gs://bucket/prefix``, addressed by paths relative to the prefix.

    Every call is retried on transient errors (:func:`is_transient`) with ``retry``; other errors become a
    :class:`StorageError` naming the object. Holds a client: not picklable, created lazily by ``RunDir``.
    """

    def __init__(
        self, bucket: str, prefix: str, retry: RetryPolicy, *, client: Client | None = None, workers: int = 8
    ) -> None:
        self.bucket_name, self.prefix, self.retry, self.workers = bucket, prefix, retry, workers
        self._client = client if client is not None else make_client()
        self.bucket: Bucket = self._client.bucket(bucket)

    def __repr__(self) -> str:
        return f"GcsStore({self.uri()!r})"

    def __reduce__(self) -> Any:
        raise TypeError("GcsStore holds a GCS client and is not picklable; pickle the RunDir instead")

    # ----------------------------------------------------------------------------- names
    def name(self, rel: str) -> str:
        """Object name of ``rel`` (a path relative to the prefix)."""
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def uri(self, rel: str = "") -> str:
        base = f"{GS}{self.bucket_name}/{self.prefix}" if self.prefix else f"{GS}{self.bucket_name}"
        return f"{base}/{rel}" if rel else base

    # ----------------------------------------------------------------------------- calls
    def call(self, what: str, rel: str, fn: Callable[[], T], *, conflict: bool = False) -> T:
        """``fn()`` retried on transient errors; ``conflict`` turns a 412 into :class:`ManifestConflict`."""
        for attempt in range(self.retry.attempts):
            try:
                return fn()
            except Exception as err:
                if conflict and _is_precondition_failure(err):
                    raise ManifestConflict(self.uri(rel)) from None
                if not is_transient(err):
                    raise self.error(what, rel, err) from None
                if attempt + 1 == self.retry.attempts:
                    raise self.error(what, rel, err, attempts=self.retry.attempts) from None
                time.sleep(self.retry.delay(attempt))
        raise AssertionError("unreachable")

    def error(self, what: str, rel: str, err: BaseException, *, attempts: int | None = None) -> StorageError:
        tail = f" after {attempts} attempts" if attempts else ""
        return StorageError(f"{what} {self.uri(rel)} failed{tail}: {type(err).__name__}: {redact(str(err))}")

    # ----------------------------------------------------------------------------- single objects
    def get(self, rel: str) -> Blob | None:
        """The object's metadata (generation, size, custom metadata), or None if it does not exist."""
        return self.call("stat of", rel, lambda: self.bucket.get_blob(self.name(rel), retry=None))

    def read(self, rel: str) -> tuple[bytes, int] | None:
        """(content, generation) of a small object, or None if it does not exist.

        The download is conditional on the generation just read, so content and generation belong together
        (a 412 raises :class:`ManifestConflict`).
        """
        from google.api_core import exceptions as gexc

        blob = self.get(rel)
        if blob is None:
            return None
        generation = int(blob.generation or 0)

        def download() -> bytes | None:
            try:
                return blob.download_as_bytes(if_generation_match=generation or None, retry=None)
            except gexc.NotFound:
                return None

        data = self.call("download of", rel, download, conflict=True)
        return None if data is None else (data, generation)

    def write(self, rel: str, data: bytes, *, if_generation_match: int, content_type: str) -> None:
        """Upload ``data``; only if the object's generation still is ``if_generation_match`` (0: must not exist).

        A precondition failure (412) raises :class:`ManifestConflict`.
        """
        blob = self.bucket.blob(self.name(rel))

        def upload() -> None:
            blob.upload_from_string(
                data, content_type=content_type, if_generation_match=if_generation_match, retry=None
            )

        self.call("upload of", rel, upload, conflict=True)

    def upload_file(self, path: Path, rel: str, sha256: str) -> None:
        blob = self.bucket.blob(self.name(rel))
        blob.metadata = {SHA_KEY: sha256}
        self.call("upload of", rel, lambda: blob.upload_from_filename(str(path), retry=None))

    def download_file(self, blob: Blob, rel: str, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.call("download of", rel, lambda: blob.download_to_filename(str(path), retry=None))
        _set_mtime(path, blob.updated)

    def exists(self, rel: str) -> bool:
        return self.get(rel) is not None

    def any_under(self, rel: str) -> bool:
        """Whether at least one object lies under ``rel/``."""

        def first() -> bool:
            it = self._client.list_blobs(self.bucket_name, prefix=self.name(rel) + "/", max_results=1, retry=None)
            return next(iter(it), None) is not None

        return self.call("listing of", rel + "/", first)

    def list_under(self, rel: str) -> dict[str, Blob]:
        """Every object under ``rel/``, keyed by its path relative to ``rel``."""
        base = self.name(rel) + "/"

        def listing() -> dict[str, Blob]:
            blobs = self._client.list_blobs(self.bucket_name, prefix=base, retry=None)
            return {b.name[len(base) :]: b for b in blobs}

        out = self.call("listing of", rel + "/", listing)
        for sub in out:
            parts = PurePosixPath(sub).parts
            if not sub or sub.startswith("/") or any(p in ("..", ".") for p in parts):
                raise StorageError(f"object {self.uri(rel + '/' + sub)} has a name unsafe to download")
        return out

    def delete(self, rels: Sequence[str]) -> None:
        from google.api_core import exceptions as gexc

        for rel in rels:
            blob = self.bucket.blob(self.name(rel))

            def remove(blob: Blob = blob) -> None:
                with contextlib.suppress(gexc.NotFound):  # already gone: fine
                    blob.delete(retry=None)

            self.call("delete of", rel, remove)

    # ----------------------------------------------------------------------------- many objects
    def upload_many(self, items: Sequence[tuple[Path, str, str]]) -> None:
        """Upload (local path, rel, sha256) in parallel (transfer_manager, threads); retry what failed."""
        from google.cloud.storage import transfer_manager

        def blob(rel: str, sha: str) -> Blob:
            b = self.bucket.blob(self.name(rel))
            b.metadata = {SHA_KEY: sha}
            return b

        def run(batch: Sequence[tuple[Path, str, str]]) -> list[Any]:
            return transfer_manager.upload_many(
                [(str(p), blob(rel, sha)) for p, rel, sha in batch],
                upload_kwargs={"retry": None},
                raise_exception=False,
                worker_type=transfer_manager.THREAD,
                max_workers=self.workers,
            )

        self._many("upload of", items, run, lambda item: item[1])

    def download_many(self, items: Sequence[tuple[Blob, str, Path]]) -> None:
        """Download (blob, rel, local path) in parallel (transfer_manager, threads); retry what failed."""
        from google.cloud.storage import transfer_manager

        for _, _, path in items:
            path.parent.mkdir(parents=True, exist_ok=True)

        def run(batch: Sequence[tuple[Blob, str, Path]]) -> list[Any]:
            return transfer_manager.download_many(
                [(b, str(p)) for b, _, p in batch],
                download_kwargs={"retry": None},
                raise_exception=False,
                worker_type=transfer_manager.THREAD,
                max_workers=self.workers,
            )

        self._many("download of", items, run, lambda item: item[1])
        for b, _, p in items:
            _set_mtime(p, b.updated)

    def _many(
        self,
        what: str,
        items: Sequence[T],
        run: Callable[[Sequence[T]], list[Any]],
        rel_of: Callable[[T], str],
    ) -> None:
        pending = list(items)
        for attempt in range(self.retry.attempts):
            if not pending:
                return
            results = run(pending)
            failed = [(item, r) for item, r in zip(pending, results, strict=True) if isinstance(r, BaseException)]
            for item, err in failed:
                if not is_transient(err):
                    raise self.error(what, rel_of(item), err) from None
            if not failed:
                return
            pending = [item for item, _ in failed]
            if attempt + 1 < self.retry.attempts:
                time.sleep(self.retry.delay(attempt))
        item, err = failed[0]
        more = f" (and {len(failed) - 1} more objects)" if len(failed) > 1 else ""
        raise StorageError(
            f"{what} {self.uri(rel_of(item))}{more} failed after {self.retry.attempts} attempts: "
            f"{type(err).__name__}: {redact(str(err))}"
        )


def _set_mtime(path: Path, when: datetime | None) -> None:
    """Give a downloaded file the object's upload time (e.g. the package's training date reads it)."""
    if when is not None and path.exists():
        t = when.timestamp()
        os.utime(path, (t, t))
