"""Google Cloud Storage backend of `gs://bucket/prefix` run directories: client, retries, parallel transfers.

google-cloud-storage is imported only when a gs:// root is used (`rts --help` stays fast). Nothing here holds
credentials in picklable state, and every error message is passed through :func:`redact`.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, TypeVar

from rtscore.storage.errors import StorageError

if TYPE_CHECKING:
    from google.api_core.retry import Retry
    from google.cloud.storage import Blob, Bucket, Client
    from google.cloud.storage.retry import ConditionalRetryPolicy

T = TypeVar("T")

GS = "gs://"
EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
EMULATOR_PROJECT = "rts-emulator"  # a placeholder: the emulator accepts any project
CREDENTIALS_ENV = "GOOGLE_APPLICATION_CREDENTIALS"
SHA_KEY = "sha256"  # custom object metadata: sha256 of the object's content, set at upload

_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_ATTEMPTS_ENV = "RTS_GCS_RETRY_ATTEMPTS"  # replaced by RTS_GCS_RETRY_DEADLINE_S; rejected so it is not silently ignored
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
    """How GCS calls are retried: the knobs of google-api-core's :class:`~google.api_core.retry.Retry` (which
    the client library runs) and the rounds of the manifest's read-modify-write under concurrent writers (412).

    Defaults come from ``RTS_GCS_RETRY_DEADLINE_S``, ``RTS_GCS_RETRY_INITIAL_S``, ``RTS_GCS_RETRY_MAX_S``,
    ``RTS_GCS_RETRY_MULTIPLIER`` and ``RTS_GCS_CONFLICT_ATTEMPTS`` (see :meth:`from_env`). Plain data (picklable);
    :meth:`retry` and :meth:`conditional` build the library's objects.
    """

    deadline_s: float = 120.0  # stop retrying one call once the next wait would end past this (library default)
    initial_s: float = 0.5  # first wait
    max_s: float = 30.0  # longest wait
    multiplier: float = 2.0
    conflict_attempts: int = 20  # read-modify-write rounds of the manifest under concurrent writers

    def __post_init__(self) -> None:
        if self.conflict_attempts < 1:
            raise ValueError(f"conflict attempts must be >= 1; got {self.conflict_attempts}")
        if self.deadline_s <= 0 or self.initial_s <= 0 or self.max_s < self.initial_s or self.multiplier < 1:
            raise ValueError(
                "the deadline and the first wait must be > 0, the longest wait >= the first and the multiplier >= 1; "
                f"got deadline {self.deadline_s}, initial {self.initial_s}, max {self.max_s}, "
                f"multiplier {self.multiplier}"
            )

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

        if os.environ.get(_ATTEMPTS_ENV):
            raise StorageError(
                f"{_ATTEMPTS_ENV} is no longer read: GCS calls are retried by the client library until a deadline; "
                "unset it and set RTS_GCS_RETRY_DEADLINE_S (seconds, default 120) instead"
            )
        d = cls()
        try:
            return cls(
                deadline_s=get("RTS_GCS_RETRY_DEADLINE_S", d.deadline_s),
                initial_s=get("RTS_GCS_RETRY_INITIAL_S", d.initial_s),
                max_s=get("RTS_GCS_RETRY_MAX_S", d.max_s),
                multiplier=get("RTS_GCS_RETRY_MULTIPLIER", d.multiplier),
                conflict_attempts=int(get("RTS_GCS_CONFLICT_ATTEMPTS", d.conflict_attempts)),
            )
        except ValueError as err:  # out of range: name the variables a user sets
            raise StorageError(f"RTS_GCS_RETRY_* / RTS_GCS_CONFLICT_ATTEMPTS: {err}") from None

    def retry(self) -> Retry:
        """The library's retry for idempotent calls (reads, listings, deletes): transient errors
        (:func:`is_transient`, a checksum mismatch aside) are retried with capped exponential backoff and jitter
        until the deadline."""
        return self._retry(_retry_in_place)

    def redownload(self) -> Retry:
        """The library's retry around a whole download, for a checksum mismatch in transit: the library's own
        retry resumes a download at the bytes already received, which cannot repair bytes that arrived wrong."""
        return self._retry(_is_corruption)

    def _retry(self, predicate: Callable[[Exception], bool]) -> Retry:
        from google.api_core.retry import Retry

        return Retry(
            predicate=predicate,
            initial=self.initial_s,
            maximum=self.max_s,
            multiplier=self.multiplier,
            timeout=self.deadline_s,
        )

    def conditional(self) -> ConditionalRetryPolicy:
        """The library's retry for writes: only a call that carries a generation precondition
        (``if_generation_match``, 0 for "must not exist") is retried, since only such a call is idempotent."""
        from google.cloud.storage.retry import ConditionalRetryPolicy, is_generation_specified

        return ConditionalRetryPolicy(self.retry(), is_generation_specified, ["query_params"])

    def delay(self, attempt: int) -> float:
        """Seconds to wait before read-modify-write round ``attempt + 1`` of the manifest (0-based): capped
        exponential with full jitter. Transport errors are not retried with this: see :meth:`retry`."""
        cap = min(self.max_s, self.initial_s * self.multiplier**attempt)
        return cap * random.uniform(0.5, 1.0)


SMALL_OBJECT_FACTOR = 4  # small_object_workers(): this many times transfer_workers()


def transfer_workers() -> int:
    """Parallel transfers of one directory artifact (``RTS_GCS_WORKERS``, default 8)."""
    raw = os.environ.get("RTS_GCS_WORKERS", "8")
    try:
        n = int(raw)
    except ValueError:
        raise StorageError(f"RTS_GCS_WORKERS must be an integer; got {raw!r}") from None
    return max(1, n)


def small_object_workers() -> int:
    """Parallel requests for many small objects (a campaign's parts files, its log objects): latency-bound, not
    bandwidth-bound, so four times :func:`transfer_workers` (32 by default). The client's connection pool is as
    large (:func:`make_client`)."""
    return SMALL_OBJECT_FACTOR * transfer_workers()


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


def _is_corruption(err: BaseException) -> bool:
    from google.cloud.storage.exceptions import DataCorruption

    return isinstance(err, DataCorruption)


def _retry_in_place(err: BaseException) -> bool:
    """What the library retries within a call: the transient errors but a checksum mismatch (see
    :meth:`RetryPolicy.redownload`)."""
    return is_transient(err) and not _is_corruption(err)


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
        return _wide_pool(storage.Client(credentials=AnonymousCredentials(), project=project))
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return _wide_pool(storage.Client())
    except DefaultCredentialsError as err:
        raise StorageError(credentials_problem(err)) from None


def _wide_pool(client: Client) -> Client:
    """The client's HTTP session with a connection pool for :func:`small_object_workers` threads (requests keeps 10
    connections a host: more threads would open and drop connections, each drop a urllib3 warning)."""
    from requests.adapters import HTTPAdapter

    size = max(10, small_object_workers())
    for prefix in ("https://", "http://"):
        client._http.mount(prefix, HTTPAdapter(pool_connections=10, pool_maxsize=size))
    return client


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


def check_access(uri: str, *, must_exist: bool = False) -> None:
    """Before any work on ``gs://bucket/prefix``: the credentials load and are accepted, the bucket exists and
    they may list it (one listing of at most one object, under the retry of :meth:`RetryPolicy.from_env`); with
    ``must_exist``, at least one object lies under the prefix. Nothing is written (so write permission is known
    only at the first write, which names the object).

    Raises:
        StorageError: naming ``uri`` and what is wrong: the credentials (:func:`credentials_problem`), a bucket
            that does not exist, a permission, the network, or no objects under the prefix.
    """
    from google.api_core import exceptions as gexc
    from google.api_core.exceptions import RetryError
    from google.auth.exceptions import DefaultCredentialsError, RefreshError

    bucket, prefix = parse_gs_uri(uri)
    retry = RetryPolicy.from_env()
    client = shared_client()  # StorageError when no credentials are configured or their file does not load
    try:
        listing = client.list_blobs(bucket, prefix=f"{prefix}/" if prefix else None, max_results=1, retry=retry.retry())
        first = next(iter(listing), None)
    except (RefreshError, DefaultCredentialsError) as err:  # they load, but are refused (revoked, expired)
        raise StorageError(f"{uri}: {credentials_problem(err)}") from None
    except gexc.NotFound:
        raise StorageError(
            f"{uri}: bucket gs://{bucket} does not exist (or these credentials cannot see it); check the bucket name"
        ) from None
    except (gexc.Forbidden, gexc.Unauthorized) as err:
        raise StorageError(
            f"{uri}: these credentials may not list gs://{bucket} ({type(err).__name__}: {redact(str(err))}); "
            "a run needs to list, read and write objects there"
        ) from None
    except RetryError as err:
        cause = err.cause if err.cause is not None else err
        raise StorageError(
            f"{uri}: not reachable after retrying for {retry.deadline_s:g} s (RTS_GCS_RETRY_DEADLINE_S): "
            f"{type(cause).__name__}: {redact(str(cause))}"
        ) from None
    except Exception as err:
        raise StorageError(f"{uri}: listing failed: {type(err).__name__}: {redact(str(err))}") from None
    if must_exist and first is None:
        raise StorageError(f"{uri}: no objects under this prefix (nothing to read there)")


# One client per process and per what makes clients differ (see shared_client); replaced whole in a forked
# child (register_at_fork below), so a child never shares its parent's HTTP connections or lock.
_clients: dict[tuple[int, str, str, str], Client] = {}
_clients_lock = threading.Lock()


def client_key() -> tuple[int, str, str, str]:
    """What makes one process's clients differ: the process, the emulator host, the project and the
    credentials file named in the environment (Application Default Credentials otherwise)."""
    env = os.environ.get
    return (os.getpid(), env(EMULATOR_ENV, ""), env("GOOGLE_CLOUD_PROJECT", ""), env(CREDENTIALS_ENV, ""))


def shared_client() -> Client:
    """This process's client for the current environment (:func:`client_key`), made once by
    :func:`make_client`: its HTTP session (connection pool, token) is reused by every ``GcsStore``.
    Thread-safe; a child process after ``fork`` makes its own."""
    key = client_key()
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = make_client()
    return client


def reset_clients() -> None:
    """Forget this process's clients: the next :func:`shared_client` makes a new one (e.g. after the
    credentials file named in the environment was rewritten in place)."""
    global _clients, _clients_lock
    _clients, _clients_lock = {}, threading.Lock()


os.register_at_fork(after_in_child=reset_clients)  # the parent's lock may be held and its sockets are shared


class GcsStore:
    """The objects under one ``gs://bucket/prefix``, addressed by paths relative to the prefix.

    Every call hands the client library a retry built from ``retry`` (:meth:`RetryPolicy.retry` for reads,
    listings and deletes, :meth:`RetryPolicy.conditional` for uploads, which always carry a generation
    precondition); errors that remain become a :class:`StorageError` naming the object. Holds a client (by
    default the process's :func:`shared_client`): not picklable, created lazily by ``RunDir``.
    """

    def __init__(
        self, bucket: str, prefix: str, retry: RetryPolicy, *, client: Client | None = None, workers: int = 8
    ) -> None:
        self.bucket_name, self.prefix, self.retry, self.workers = bucket, prefix, retry, workers
        self.idempotent, self.guarded, self.redownload = retry.retry(), retry.conditional(), retry.redownload()
        self._client = client if client is not None else shared_client()
        self.bucket: Bucket = self._client.bucket(bucket)
        self.endpoint = client_key()[1:]  # where the objects live (emulator host, project, credentials)

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
        """``fn()`` (which retries through the library); ``conflict`` turns a 412 into :class:`ManifestConflict`,
        any other error becomes a :class:`StorageError`."""
        try:
            return fn()
        except Exception as err:
            if conflict and _is_precondition_failure(err):
                raise ManifestConflict(self.uri(rel)) from None
            raise self.error(what, rel, err) from None

    def error(self, what: str, rel: str, err: BaseException) -> StorageError:
        from google.api_core.exceptions import RetryError

        tail = ""
        if isinstance(err, RetryError):  # the library gave up on a transient error: report that error
            tail = f" after retrying for {self.retry.deadline_s:g} s (RTS_GCS_RETRY_DEADLINE_S)"
            err = err.cause if err.cause is not None else err
        return StorageError(f"{what} {self.uri(rel)} failed{tail}: {type(err).__name__}: {redact(str(err))}")

    # ----------------------------------------------------------------------------- single objects
    def get(self, rel: str) -> Blob | None:
        """The object's metadata (generation, size, custom metadata), or None if it does not exist."""
        return self.call("stat of", rel, lambda: self.bucket.get_blob(self.name(rel), retry=self.idempotent))

    def read(self, rel: str) -> tuple[bytes, int] | None:
        """(content, generation) of a small object, or None if it does not exist.

        The download is conditional on the generation just read, so content and generation belong together
        (a 412 raises :class:`ManifestConflict`).
        """
        got = self.read_unless(rel, known=0)
        if got is None:
            return None
        data, generation = got
        assert data is not None  # known=0: always downloaded
        return data, generation

    def read_unless(self, rel: str, *, known: int) -> tuple[bytes | None, int] | None:
        """As :meth:`read`, but one request (the object's metadata) when its generation still is ``known``
        (a generation whose content the caller holds; 0: none): the content is then None, not downloaded."""
        from google.api_core import exceptions as gexc

        blob = self.get(rel)
        if blob is None:
            return None
        generation = int(blob.generation or 0)
        if known and generation == known:
            return None, generation

        def download() -> bytes | None:
            try:
                return blob.download_as_bytes(if_generation_match=generation or None, retry=self.idempotent)
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
                data, content_type=content_type, if_generation_match=if_generation_match, retry=self.guarded
            )

        self.call("upload of", rel, upload, conflict=True)

    def upload_file(self, path: Path, rel: str, sha256: str, *, generation: int) -> None:
        """Upload ``path`` as ``rel`` only if the object still is at ``generation`` (0: must not exist), so a
        retried upload is idempotent and a concurrent writer's object is never clobbered. A 412 is fine when the
        object now holds this content (our own earlier try landed); otherwise it is an error."""
        blob = self.bucket.blob(self.name(rel))
        blob.metadata = {SHA_KEY: sha256}
        from google.api_core import exceptions as gexc

        try:
            blob.upload_from_filename(str(path), if_generation_match=generation, retry=self.guarded)
            return
        except gexc.PreconditionFailed:
            pass
        except Exception as err:
            raise self.error("upload of", rel, err) from None
        now = self.get(rel)
        if now is None or (now.metadata or {}).get(SHA_KEY) != sha256 or now.size != path.stat().st_size:
            raise StorageError(
                f"upload of {self.uri(rel)} refused: the object changed since it was listed (generation "
                f"{generation}); another worker is writing this artifact, let one of them finish"
            )

    def copy_object(self, source: Blob, rel: str, sha256: str, *, generation: int) -> None:
        """Copy the object ``source`` (of any bucket of this endpoint, pinned to the generation it was listed at)
        to ``rel`` server-side (a rewrite: no byte passes through this machine), only if the object here still is
        at ``generation`` (0: must not exist). The copy carries ``sha256`` as its metadata, as an upload does.
        A 412 is fine when the object now holds this content (our own earlier try landed); otherwise it is an
        error (the source changed since it was listed, or another writer wrote ``rel``)."""
        from google.api_core import exceptions as gexc

        blob = self.bucket.blob(self.name(rel))
        blob.metadata = {SHA_KEY: sha256}
        token: str | None = None
        try:
            while True:  # a large object may take several rewrite calls, each resuming at the token
                token, _, _ = blob.rewrite(
                    source,
                    token=token,
                    if_generation_match=generation,
                    if_source_generation_match=int(source.generation or 0) or None,
                    retry=self.guarded,
                )
                if token is None:
                    break
        except gexc.PreconditionFailed:
            blob = self.get(rel)
        except Exception as err:
            raise self.error("copy of", rel, err) from None
        if blob is None or (blob.metadata or {}).get(SHA_KEY) != sha256 or blob.size != source.size:
            raise StorageError(
                f"copy of gs://{source.bucket.name}/{source.name} to {self.uri(rel)} refused: the source or the "
                f"destination changed since they were listed (generation {generation}); another worker is writing "
                "this artifact, let it finish and adopt again"
            )

    def download_file(self, blob: Blob, rel: str, path: Path) -> None:
        """Download ``blob`` to ``path``; a checksum mismatch in transit downloads it again from the start."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fetch = self.redownload(lambda: blob.download_to_filename(str(path), retry=self.idempotent))
        self.call("download of", rel, fetch)
        _set_mtime(path, blob.updated)

    def exists(self, rel: str) -> bool:
        return self.get(rel) is not None

    def any_under(self, rel: str) -> bool:
        """Whether at least one object lies under ``rel/``."""

        def first() -> bool:
            it = self._client.list_blobs(
                self.bucket_name, prefix=self.name(rel) + "/", max_results=1, retry=self.idempotent
            )
            return next(iter(it), None) is not None

        return self.call("listing of", rel + "/", first)

    def list_under(self, rel: str, *, ending: str | None = None) -> dict[str, Blob]:
        """Every object under ``rel/`` (with ``ending``: whose name ends so, filtered by the server, e.g. the parts
        files among a campaign's 4 x 10^5 scene files), keyed by its path relative to ``rel``."""
        base = self.name(rel) + "/"
        if ending is not None and any(c in ending for c in "*?[]{}\\"):
            raise ValueError(f"list_under: {ending!r} is not a plain name ending")

        def listing() -> dict[str, Blob]:
            glob = None if ending is None else f"**{ending}"  # the prefix selects the folder, the glob the names
            blobs = self._client.list_blobs(self.bucket_name, prefix=base, match_glob=glob, retry=self.idempotent)
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
                with contextlib.suppress(gexc.NotFound):  # already gone (or our retried delete landed): fine
                    blob.delete(retry=self.idempotent)

            self.call("delete of", rel, remove)

    # ----------------------------------------------------------------------------- many objects
    def upload_many(self, items: Sequence[tuple[Path, str, str, int]]) -> None:
        """Upload (local path, rel, sha256, generation) in parallel threads, each as :meth:`upload_file` (its own
        precondition: transfer_manager would share one set of upload arguments across all objects)."""
        self._parallel([partial(self.upload_file, p, rel, sha, generation=g) for p, rel, sha, g in items])

    def copy_many(self, items: Sequence[tuple[Blob, str, str, int]]) -> None:
        """Copy (source blob, rel, sha256, generation) server-side in parallel threads, each as :meth:`copy_object`."""
        self._parallel([partial(self.copy_object, b, rel, sha, generation=g) for b, rel, sha, g in items])

    def download_many(self, items: Sequence[tuple[Blob, str, Path]]) -> None:
        """Download (blob, rel, local path) in parallel threads, each as :meth:`download_file`."""
        self._parallel([partial(self.download_file, b, rel, p) for b, rel, p in items])

    def _parallel(self, jobs: Sequence[Callable[[], None]]) -> None:
        """Run ``jobs`` (which raise StorageError only) on ``workers`` threads; all finish before the first error
        is raised, with the number of others that failed."""
        if not jobs:
            return
        with ThreadPoolExecutor(max_workers=min(self.workers, len(jobs))) as pool:
            futures = [pool.submit(job) for job in jobs]
        errors = [err for f in futures if (err := f.exception()) is not None]
        if errors:
            more = f" (and {len(errors) - 1} more objects)" if len(errors) > 1 else ""
            raise StorageError(f"{errors[0]}{more}") from None


def _set_mtime(path: Path, when: datetime | None) -> None:
    """Give a downloaded file the object's upload time (e.g. the package's training date reads it)."""
    if when is not None and path.exists():
        t = when.timestamp()
        os.utime(path, (t, t))
