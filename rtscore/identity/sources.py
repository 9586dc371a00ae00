"""Content identity of what a result reads from outside the run directory: a GeoTIFF data root, a scene.

A result is reused only when every input it read is the same. Inside a run directory that is the manifest's
sha256 of each artifact; outside it (a data root of thousands of tiles, a local directory or a ``gs://``
prefix) hashing every pixel on every run would cost minutes, so the identity is a *listing*:

- a local file: its path relative to the root, size, ``st_mtime_ns``, ``st_ctime_ns`` and inode, plus the
  sha256 of its content where that is cheap: every file that is not a raster and is at most :data:`HASH_BELOW`
  bytes (``metadata.csv``, ``splits.yaml``, a polygon inventory), which decide what is read and how. Any write
  moves the mtime, but ``os.utime`` (``touch -d``) can set it back; no user-level call sets the change time,
  which every write, ``utime``, ``chmod`` or rename-over moves, and a file replaced by another gets another
  inode. So a raster rewritten in place with its size and old mtime kept is a new identity (the trade-off and
  its one window, a rewrite within the kernel clock tick of the listing itself, are those of the verification
  records, :mod:`rtscore.storage.verified`). The price: a copy is another identity even where it keeps the
  names, sizes and times (``cp -p``, ``rsync -a``, a restore from a backup; a ``chmod`` too), so a root restored
  in place is generated again once (the same tiles, the same sha256: nothing after generation re-runs), and an
  interrupted ``rts tile`` or ``rts warp`` whose scenes were copied elsewhere starts afresh. The same files
  reached through another path (a relative path, another working directory, a symbolic link) keep their
  identity: the digest holds no path that leads to the root;
- a ``gs://`` object: its name, size, generation (a new one on every write, even of the same bytes) and the
  CRC32C GCS reports, all from one listing.

Hidden names (a leading ``.``) are bookkeeping (``rts tile``'s ``.rts-tile/``, a half-written ``.partial``)
and are not part of a root's identity. The identity of a 10,000-tile root is one directory walk or one object
listing; ``bench/identity_bench.py`` measures it.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rtscore.errors import PipelineError
from rtscore.storage.files import sha256_file
from rtscore.storage.gcs import GS, GcsStore, RetryPolicy, parse_gs_uri

HASH_BELOW = 1 << 20  # non-raster files up to this size are hashed: they decide what is read
RASTER_SUFFIXES = (".tif", ".tiff", ".vrt", ".jp2", ".png")


class SourceError(PipelineError):
    """A source location cannot be listed (it does not exist, or it is neither a file nor a directory)."""


class SourceIdentity(BaseModel):
    """What a location held when it was read: one digest over the listing of its files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    uri: str = Field(..., description="The location (a resolved local path or a gs:// URI).")
    files: int = Field(..., ge=0, description="Files (objects) listed.")
    bytes: int = Field(..., ge=0, description="Their total size.")
    digest: str = Field(
        ...,
        description="sha256 over the listing: name, size, mtime, ctime and inode (gs://: generation, CRC32C), "
        "content hash of the small non-raster files.",
    )

    def short(self) -> str:
        """A one-line description for messages: ``<uri> (<files> files, digest <12 hex>)``."""
        return f"{self.uri} ({self.files} files, digest {self.digest[:12]})"


def _cheap_hash(path: Path, size: int) -> str:
    if size > HASH_BELOW or path.suffix.lower() in RASTER_SUFFIXES:
        return ""
    return sha256_file(path)


def _walk(top: str, prefix: str, out: list[tuple[str, os.stat_result, str]]) -> None:
    with os.scandir(top) as it:
        for e in it:
            if e.name.startswith("."):
                continue
            if e.is_dir():
                _walk(e.path, f"{prefix}{e.name}/", out)
                continue
            try:
                st = e.stat()
            except FileNotFoundError:  # a dangling link is no file of the root
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((f"{prefix}{e.name}", st, e.path))


def local_identity(path: str | Path) -> SourceIdentity:
    """The identity of a local file or directory tree (hidden names below a directory left out)."""
    p = Path(path).resolve()
    try:
        top = p.stat()
    except FileNotFoundError:
        raise SourceError(f"{p} does not exist") from None
    entries: list[tuple[str, os.stat_result, str]] = []
    if stat.S_ISREG(top.st_mode):
        entries = [(p.name, top, str(p))]
    elif stat.S_ISDIR(top.st_mode):
        try:
            _walk(str(p), "", entries)
        except OSError as err:  # a folder that cannot be listed
            where = err.filename or p
            raise SourceError(
                f"{where}: cannot list it to identify {p}: {err.strerror or type(err).__name__}"
            ) from None
        entries.sort(key=lambda e: e[0])
    else:
        raise SourceError(f"{p} is neither a file nor a directory")
    h = hashlib.sha256()
    total = 0
    for name, st, full in entries:
        total += st.st_size
        try:
            content = _cheap_hash(Path(full), st.st_size)
        except OSError as err:  # unreadable (permissions), vanished mid-listing
            raise SourceError(f"{full}: cannot read it to identify {p}: {err.strerror or type(err).__name__}") from None
        h.update(f"{name}\t{st.st_size}\t{st.st_mtime_ns}\t{st.st_ctime_ns}\t{st.st_ino}\t{content}\n".encode())
    return SourceIdentity(uri=str(p), files=len(entries), bytes=total, digest=h.hexdigest())


def gs_identity(uri: str) -> SourceIdentity:
    """The identity of a ``gs://`` object, or of every object under a ``gs://`` prefix (one listing)."""
    bucket, prefix = parse_gs_uri(uri)
    prefix = prefix.rstrip("/")
    if not prefix:
        raise SourceError(f"{uri}: give a prefix inside the bucket (gs://bucket/prefix), not the bucket itself")
    store = GcsStore(bucket, "", RetryPolicy.from_env())
    rows: list[tuple[str, int, int, str]] = []
    single = store.get(prefix)
    if single is not None:
        name = prefix.rpartition("/")[2]
        rows.append((name, int(single.size or 0), int(single.generation or 0), single.crc32c or ""))
    else:
        for name, blob in store.list_under(prefix).items():
            if any(part.startswith(".") for part in name.split("/")):
                continue
            rows.append((name, int(blob.size or 0), int(blob.generation or 0), blob.crc32c or ""))
        if not rows:
            raise SourceError(f"{uri} holds no object")
    rows.sort()
    h = hashlib.sha256()
    for name, size, generation, crc in rows:
        h.update(f"{name}\t{size}\tg{generation}\t{crc}\n".encode())
    return SourceIdentity(
        uri=f"{GS}{bucket}/{prefix}",
        files=len(rows),
        bytes=sum(r[1] for r in rows),
        digest=h.hexdigest(),
    )


def source_identity(location: str | Path) -> SourceIdentity:
    """The identity of a local path or a ``gs://`` location (see the module docstring for what it covers)."""
    text = str(location)
    return gs_identity(text) if text.startswith(GS) else local_identity(text)


# Files GDAL or OGR read beside an input: a shapefile's parts, a raster's mask and auxiliary metadata.
SIDECARS = {".shp": (".dbf", ".shx", ".prj", ".cpg")}
RASTER_SIDECARS = (".msk", ".aux.xml")


def file_identity(path: Path) -> str:
    """The identity of one input file and of the sidecars GDAL reads with it: :func:`source_identity` (name,
    size, mtime, ctime, inode, the content hash of a small non-raster file), never the path that leads to it."""
    parts = [source_identity(path).digest]
    beside = [path.with_suffix(ext) for ext in SIDECARS.get(path.suffix.lower(), ())]
    beside += [path.with_name(path.name + ext) for ext in RASTER_SIDECARS]
    parts += [f"{p.name}:{source_identity(p).digest}" for p in beside if p.is_file()]
    return "+".join(parts)
