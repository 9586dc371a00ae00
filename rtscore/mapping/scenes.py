"""A mapping campaign's scenes: listed from a directory, a data root, a gs:// prefix or a scene list CSV, each with
its identity (what its raster and its companions, the EXTRA raster, held when listed).

A scene's identity is what makes a log record a resume point for it (:mod:`rtscore.mapping.campaign_log`): a
local file counts by its sha256, a gs:// object by its generation (size, CRC32C), read later pinned to that
generation.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rtscore.data.raster.bands import RGB_DIR, extra_candidates
from rtscore.data.raster.scene_date import SceneDateError, parse_scene_date
from rtscore.errors import PipelineError
from rtscore.storage.files import os_errors, sha256_file
from rtscore.storage.gcs import GS, GcsStore, RetryPolicy, parse_gs_uri, transfer_workers

if TYPE_CHECKING:
    from google.cloud.storage import Blob

SCENE_SUFFIXES = (".tif", ".tiff")  # what a directory or gs:// prefix input lists as scenes
CSV_PATH_COLUMNS = ("path", "uri")  # a scene list CSV names its scenes in exactly one of these
CSV_ID_COLUMN = "scene_id"
CSV_DATE_COLUMN = "date"  # optional: the scene's acquisition date, read by rts arts export (docs/arts.md)
_SCENE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]*")


class CampaignError(PipelineError):
    """The campaign's input (directory, prefix, scene list) or its log cannot be used as asked."""


class InputIdentity(BaseModel):
    """What a file's content was when it was listed: sha256 of a local file, the generation of a gs:// object
    (a rewrite gives a new generation even with the same bytes: such a scene is mapped again)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: str | None = Field(None, description="sha256 of a local file's content.")
    generation: int | None = Field(None, description="Generation of a gs:// object.")
    size: int = Field(..., ge=0, description="Bytes.")
    crc32c: str | None = Field(None, description="The object's CRC32C (base64), when GCS reports one.")
    md5: str | None = Field(None, description="The object's MD5 (base64), when GCS reports one.")

    @model_validator(mode="after")
    def _one_kind(self) -> InputIdentity:
        if (self.sha256 is None) == (self.generation is None):
            raise ValueError("an input identity has either a sha256 (local file) or a generation (gs:// object)")
        return self


class CompanionInput(BaseModel):
    """A file mapping reads for a scene besides its raster (its EXTRA raster): where it is and what it held when
    the scene was listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["extra"] = Field(..., description="What the file is to the scene: its EXTRA raster.")
    uri: str = Field(..., description="Where it is read from (where rts predict looks for it).")
    identity: InputIdentity | None = Field(..., description="Its content; None: absent when listed.")


@dataclass(frozen=True)
class Scene:
    """One scene of a campaign: its stable id, where it is, and what its content is. A scene's identity is
    ``identity`` (its raster) and ``companions`` (the other files mapping reads for it: the EXTRA raster, listed
    with ``list_scenes(..., extra=True)``), each pinned for gs:// to the generation listed."""

    scene_id: str
    uri: str
    identity: InputIdentity
    companions: tuple[CompanionInput, ...] = ()

    @property
    def extra(self) -> CompanionInput | None:
        """The scene's EXTRA raster as listed (None: listed without companions)."""
        return next((c for c in self.companions if c.role == "extra"), None)


def list_scenes(source: str | Path, *, extra: bool = False) -> list[Scene]:
    """The campaign's scenes, sorted by id: every GeoTIFF (``.tif``/``.tiff``, any case, in subfolders too,
    hidden names aside) of a local directory or under a ``gs://bucket/prefix``, or the rows of a scene list CSV
    (local or ``gs://``; see :func:`read_scene_csv`). A local data root in the tile layout is read as
    ``rts predict`` reads one: the scenes of its ``PLANET-RGB/`` (their EXTRA rasters in ``EXTRA/``).

    ``extra`` (the package reads EXTRA bands): each scene's EXTRA raster, where ``rts predict`` looks for it
    (:func:`rtscore.data.raster.bands.extra_candidates`), is part of its identity too: sha256 of a local file,
    generation (size, CRC32C) of a gs:// object (one listing per folder outside the input's), or absent.

    Raises:
        CampaignError: the input does not exist or lists no scene, a scene id is invalid, or two scenes share an id
            (naming both).
    """
    text = str(source)
    if text.lower().endswith(".csv"):
        return read_scene_csv(text, extra=extra)
    if text.startswith(GS):
        pairs = _list_gs(text)
        find = _gs_finder(dict(pairs), text)
        scenes = [
            _gs_scene(_stem(PurePosixPath(uri).name), uri, blob, _gs_companions(uri, find) if extra else ())
            for uri, blob in pairs
        ]
    else:
        root = Path(text).expanduser()
        if not root.is_dir():
            raise CampaignError(f"campaign input {root}: not a directory, a gs:// prefix or a .csv scene list")
        if (root / RGB_DIR).is_dir():  # a data root (the tile layout): its scenes, as rts predict reads one
            root = root / RGB_DIR
        files = sorted(
            p
            for p in root.rglob("*")
            if p.suffix.lower() in SCENE_SUFFIXES
            and p.is_file()
            and not any(part.startswith(".") for part in p.relative_to(root).parts)
        )
        hashes = _Hashes()
        scenes = [_local_scene(_stem(p.name), p, where=str(p), extra=extra, hashes=hashes) for p in files]
    if not scenes:
        raise CampaignError(f"campaign input {text}: no GeoTIFF scene (*.tif, *.tiff) found")
    return _unique(scenes)


def read_scene_csv(source: str, *, extra: bool = False) -> list[Scene]:
    """The scenes of a scene list CSV: a ``path`` or ``uri`` column (local paths, relative ones against the CSV's
    folder, or ``gs://`` URIs) and an optional ``scene_id`` column (the file stem when absent or empty); ``extra`` as
    for :func:`list_scenes`.

    Raises:
        CampaignError: naming the file, the row (line number) and the column of a bad cell.
    """
    reader = csv.DictReader(io.StringIO(_read_text(source)))
    path_col = _path_column(source, reader)
    scenes = []
    hashes = _Hashes()
    for row in reader:
        line = reader.line_num
        cells = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
        ref = cells.get(path_col, "")
        where = f"scene list {source}, row {line}, column {path_col!r}"
        if not ref:
            raise CampaignError(f"{where}: empty (expected a path or gs:// URI of a scene)")
        scene_id = cells.get(CSV_ID_COLUMN) or _stem(PurePosixPath(ref).name)
        id_where = f"scene list {source}, row {line}, column {CSV_ID_COLUMN!r}"
        _check_id(scene_id, id_where if cells.get(CSV_ID_COLUMN) else where)
        uri = _resolve(ref, source)
        if uri.startswith(GS):
            bucket, name = parse_gs_uri(uri)
            blob = _store(f"{GS}{bucket}").get(name)
            if blob is None:
                raise CampaignError(f"{where}: {uri} does not exist")
            scenes.append(_gs_scene(scene_id, uri, blob, _gs_companions(uri, _gs_get) if extra else ()))
        else:
            path = Path(uri)
            if not path.is_file():
                raise CampaignError(f"{where}: {path} is not a file")
            scenes.append(_local_scene(scene_id, path, where=where, extra=extra, hashes=hashes))
    if not scenes:
        raise CampaignError(f"scene list {source}: no rows")
    return _unique(scenes)


def _path_column(source: str, reader: csv.DictReader[str]) -> str:
    """The one column of a scene list naming its scenes (``path`` or ``uri``)."""
    columns = [c.strip() for c in reader.fieldnames or []]
    named = [c for c in CSV_PATH_COLUMNS if c in columns]
    if len(named) != 1:
        raise CampaignError(
            f"scene list {source}: expected exactly one of the columns {' / '.join(CSV_PATH_COLUMNS)} "
            f"(and optionally {CSV_ID_COLUMN}, {CSV_DATE_COLUMN}); found columns {columns}"
        )
    return named[0]


def read_scene_dates(source: str) -> dict[str, dt.date]:
    """The acquisition dates a scene list CSV gives in its optional ``date`` column (``YYYY-MM-DD``; an ISO date-time
    reads as its date), by scene id as :func:`read_scene_csv` names the scenes; rows with an empty date are left out.
    No scene is opened or hashed.

    Raises:
        CampaignError: naming the file, the row (line number) and the column of a cell that is not a date.
    """
    reader = csv.DictReader(io.StringIO(_read_text(source)))
    path_col = _path_column(source, reader)
    dates: dict[str, dt.date] = {}
    for row in reader:
        cells = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
        text = cells.get(CSV_DATE_COLUMN, "")
        if not text:
            continue
        scene_id = cells.get(CSV_ID_COLUMN) or _stem(PurePosixPath(cells.get(path_col, "")).name)
        try:
            dates[scene_id] = parse_scene_date(text, f"scene list {source}, row {reader.line_num}, column 'date'")
        except SceneDateError as err:
            raise CampaignError(str(err)) from None
    return dates


def chunk_scenes(scenes: Sequence[Scene], size: int) -> list[list[Scene]]:
    """``scenes`` sorted by id, split into chunks of ``size`` (the last may be smaller): the same scenes always
    give the same chunks, whatever order they were listed in."""
    if size < 1:
        raise CampaignError(f"chunk size must be >= 1; got {size}")
    ordered = sorted(scenes, key=lambda s: s.scene_id)
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def scene_now(scene: Scene, *, extra: bool) -> Scene | None:
    """``scene`` as it is now at its URI, identified by the rules of :func:`list_scenes` for that one scene and
    nothing else of the input: a gs:// object's current generation (one metadata read; its EXTRA raster's the same,
    found where ``rts predict`` looks), a local file's sha256 (its EXTRA raster's too). None: the raster is gone."""
    if scene.uri.startswith(GS):
        blob = _gs_get(scene.uri)
        if blob is None:
            return None
        return _gs_scene(scene.scene_id, scene.uri, blob, _gs_companions(scene.uri, _gs_get) if extra else ())
    path = Path(scene.uri)
    if not path.is_file():
        return None
    return _local_scene(scene.scene_id, path, where=scene.uri, extra=extra, hashes=_Hashes())


def identity_change(planned: Scene, now: Scene | None) -> str | None:
    """What changed between ``planned`` (a scene as the campaign listed it) and ``now`` (:func:`scene_now`), in words
    naming the file and both identities; None: the same raster and companions."""
    if now is None:
        return f"{planned.uri} no longer exists"
    if now.identity != planned.identity:
        then, current = _ident_text(planned.identity), _ident_text(now.identity)
        return f"scene raster {planned.uri} changed: {then} then, {current} now"
    if now.companions != planned.companions:
        before, after = planned.extra, now.extra
        where = after.uri if after is not None else before.uri if before is not None else planned.uri
        return f"EXTRA raster {where} changed: {_companion_text(before)} then, {_companion_text(after)} now"
    return None


def _ident_text(ident: InputIdentity) -> str:
    if ident.generation is not None:
        return f"generation {ident.generation} ({ident.size} bytes)"
    return f"sha256 {(ident.sha256 or '')[:12]} ({ident.size} bytes)"


def _companion_text(c: CompanionInput | None) -> str:
    if c is None:
        return "not listed"
    return f"{c.uri}, absent" if c.identity is None else f"{c.uri}, {_ident_text(c.identity)}"


def _stem(name: str) -> str:
    for suffix in SCENE_SUFFIXES:
        if name.lower().endswith(suffix):
            return name[: -len(suffix)]
    return PurePosixPath(name).stem


def _check_id(scene_id: str, where: str) -> None:
    if not _SCENE_ID_RE.fullmatch(scene_id):
        raise CampaignError(
            f"{where}: scene id {scene_id!r} is not usable in output names (expected letters, digits and . _ + -, "
            f"starting with a letter or digit); rename the file or give a {CSV_ID_COLUMN} in a scene list CSV"
        )


class _Hashes:
    """Local file identities of one listing, each file hashed once (an EXTRA raster may be listed as a file too)."""

    def __init__(self) -> None:
        self._known: dict[Path, InputIdentity] = {}

    def __call__(self, path: Path) -> InputIdentity:
        if path not in self._known:
            with os_errors("read", path):
                size = path.stat().st_size
            self._known[path] = InputIdentity(sha256=sha256_file(path), size=size)
        return self._known[path]


def _local_scene(scene_id: str, path: Path, *, where: str, extra: bool, hashes: _Hashes) -> Scene:
    _check_id(scene_id, where)
    path = path.absolute()
    companions: tuple[CompanionInput, ...] = ()
    if extra:  # where rts predict looks for it (predict.extra_path_for): the first that exists, else the last
        *first, last = extra_candidates(path)
        found = next((c for c in first if c.is_file()), last)
        identity = hashes(found) if found.is_file() else None
        companions = (CompanionInput(role="extra", uri=str(found), identity=identity),)
    return Scene(scene_id, str(path), hashes(path), companions)


def _blob_identity(blob: Blob) -> InputIdentity:
    return InputIdentity(
        generation=int(blob.generation or 0), size=int(blob.size or 0), crc32c=blob.crc32c, md5=blob.md5_hash
    )


def _gs_scene(scene_id: str, uri: str, blob: Blob, companions: tuple[CompanionInput, ...] = ()) -> Scene:
    _check_id(scene_id, uri)
    return Scene(scene_id, uri, _blob_identity(blob), companions)


def _gs_companions(uri: str, find: Callable[[str], Blob | None]) -> tuple[CompanionInput, ...]:
    """The EXTRA raster of the gs:// scene ``uri``: the first candidate object that exists (the last one named when
    none does), with its generation."""
    bucket, name = parse_gs_uri(uri)
    candidates = [f"{GS}{bucket}/{c}" for c in extra_candidates(PurePosixPath(name))]
    for c in candidates:
        blob = find(c)
        if blob is not None:
            return (CompanionInput(role="extra", uri=c, identity=_blob_identity(blob)),)
    return (CompanionInput(role="extra", uri=candidates[-1], identity=None),)


def _gs_get(uri: str) -> Blob | None:
    bucket, name = parse_gs_uri(uri)
    return _store(f"{GS}{bucket}").get(name)


def _gs_finder(known: dict[str, Blob], listed: str) -> Callable[[str], Blob | None]:
    """Looks up gs:// objects: those of the listing of ``listed`` (``known``: absent there is absent), any other by
    listing its folder once (an ``EXTRA/`` folder beside a listed ``PLANET-RGB/``)."""
    under = listed.rstrip("/") + "/"
    folders: dict[str, dict[str, Blob]] = {}

    def find(uri: str) -> Blob | None:
        if uri.startswith(under):
            return known.get(uri)
        folder = uri.rpartition("/")[0]
        if not parse_gs_uri(folder)[1]:  # an object at the bucket's top: asked for alone
            return _gs_get(uri)
        if folder not in folders:
            folders[folder] = dict(_list_gs(folder))
        return folders[folder].get(uri)

    return find


def _unique(scenes: list[Scene]) -> list[Scene]:
    seen: dict[str, Scene] = {}
    for s in scenes:
        if s.scene_id in seen:
            raise CampaignError(
                f"two scenes have the id {s.scene_id!r}: {seen[s.scene_id].uri} and {s.uri} (scene ids must be "
                f"unique: rename one, or give {CSV_ID_COLUMN}s in a scene list CSV)"
            )
        seen[s.scene_id] = s
    return sorted(seen.values(), key=lambda s: s.scene_id)


def _resolve(ref: str, csv_source: str) -> str:
    """A scene reference of a CSV row as an absolute path or gs:// URI; relative ones against the CSV's folder."""
    if ref.startswith(GS) or Path(ref).expanduser().is_absolute():
        return ref if ref.startswith(GS) else str(Path(ref).expanduser())
    if csv_source.startswith(GS):
        return GS + str(PurePosixPath(csv_source.removeprefix(GS)).parent / ref)
    return str((Path(csv_source).expanduser().absolute().parent / ref).resolve())


def _read_text(source: str) -> str:
    if source.startswith(GS):
        bucket, name = parse_gs_uri(source)
        got = _store(f"{GS}{bucket}").read(name)
        if got is None:
            raise CampaignError(f"scene list {source} does not exist")
        data = got[0]
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise CampaignError(f"scene list {path} does not exist")
        with os_errors("read", path):
            data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise CampaignError(f"scene list {source}: not UTF-8 text ({err})") from None


def _store(uri: str) -> GcsStore:
    bucket, prefix = parse_gs_uri(uri)
    return GcsStore(bucket, prefix, RetryPolicy.from_env(), workers=transfer_workers())


def _list_gs(uri: str) -> list[tuple[str, Blob]]:
    """(URI, blob) of every scene object under a gs:// prefix (all of the bucket for ``gs://bucket``)."""
    bucket, prefix = parse_gs_uri(uri)
    parent, _, leaf = prefix.rpartition("/")
    store = GcsStore(bucket, parent, RetryPolicy.from_env(), workers=transfer_workers())
    if leaf:
        found = store.list_under(leaf).items()
        pairs = [(f"{leaf}/{rel}", b) for rel, b in found]
    else:
        pairs = [
            (b.name, b)
            for b in store.call("listing of", "", lambda: list(store.bucket.list_blobs(retry=store.idempotent)))
        ]
    return sorted(
        (store.uri(rel), b)
        for rel, b in pairs
        if rel.lower().endswith(SCENE_SUFFIXES) and not any(p.startswith(".") for p in PurePosixPath(rel).parts)
    )
