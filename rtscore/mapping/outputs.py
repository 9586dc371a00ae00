"""Where a mapping campaign's outputs go: a local directory or ``gs://bucket/prefix`` (docs/mapping.md, "gs://").

A :class:`CampaignRoot` says where a scene's outputs are written (``local``: the final directory itself for a local
root; for a gs:// root a local mirror of the prefix under ``$RTS_CACHE_DIR/gcs/<bucket>/<prefix>``, the convention
of :class:`~rtscore.storage.rundir.RunDir`) and publishes them (:meth:`CampaignRoot.publish`: uploaded through
:class:`~rtscore.storage.gcs.GcsStore`, each object carrying its sha256 and written under a generation
precondition, skipped when the bucket already holds the same content; nothing to do for a local root). Campaign
files (objects, index, summary, drift report) are written locally, then published the same way.

:func:`staged_input` gives a scene's raster as a local path: a local scene in place; a gs:// scene (and its EXTRA
raster when the package reads EXTRA bands) downloaded into a temporary directory under the cache, each object pinned
to the generation the listing recorded (the scene's identity in the log), removed after the scene.
:func:`finish_scene` turns the scene's mask and probability into its parts file and publishes every file of the
scene; the run then appends the scene's ``done`` record: the record is the commit point.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from rtscore.data.raster.bands import RGB_DIR, extra_candidates
from rtscore.data.raster.ground import ground_pixel_area_m2
from rtscore.inference.predict import MANIFEST_SUFFIX, PredictManifest
from rtscore.mapping.campaign_log import CampaignLog
from rtscore.mapping.polygons import PARTS_SUFFIX, SceneParts, read_parts, scene_parts, write_parts
from rtscore.mapping.scenes import CampaignError, Scene
from rtscore.storage.files import atomic_write_text, os_errors, sha256_file
from rtscore.storage.gcs import GS, SHA_KEY, GcsStore, RetryPolicy, parse_gs_uri, transfer_workers
from rtscore.storage.rundir import RunDir, default_cache_dir

if TYPE_CHECKING:
    from google.cloud.storage import Blob

_log = logging.getLogger(__name__)

SCENES_DIR = "scenes"  # <output>/scenes/<scene_id>/: rts predict's outputs of one scene, and its parts file
STAGING_DIR = "staging"  # under the cache: one temporary directory per gs:// scene being mapped
FINISH_DIR = ".finish"  # <output's local root>/.finish/: the finish's own state (never published)
LOG_MIRROR = "log"  # under FINISH_DIR: a gs:// campaign's log objects as last read (campaign_log._LogMirror)


class CampaignRoot:
    """A campaign's output root: a local directory or ``gs://bucket/prefix`` (module docstring). Picklable: the
    GCS client is made lazily and never pickled."""

    def __init__(
        self, root: str | Path, *, cache_dir: str | Path | None = None, retry: RetryPolicy | None = None
    ) -> None:
        text = str(root)
        self.gs = parse_gs_uri(text) if text.startswith(GS) else None
        self._retry = retry
        self._store: GcsStore | None = None
        self._cache = Path(cache_dir).expanduser().resolve() if cache_dir is not None else None
        if self.gs is not None:
            self.uri = text.rstrip("/")
            self.local = RunDir(text, cache_dir=cache_dir).root  # RunDir's mirror of a gs:// location
        else:
            self.local = Path(text).expanduser().absolute()
            self.uri = str(self.local)

    def __repr__(self) -> str:
        return f"CampaignRoot({self.uri!r})"

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_store": None}

    @property
    def remote(self) -> bool:
        return self.gs is not None

    @property
    def cache_dir(self) -> Path:
        return self._cache if self._cache is not None else default_cache_dir()

    def log(self) -> CampaignLog:
        # gs://: the log objects read are kept under the mirror's finish state, so a finish downloads the new ones
        mirror = self.local / FINISH_DIR / LOG_MIRROR if self.gs is not None else None
        return CampaignLog(self.uri, retry=self._retry, mirror=mirror)

    def store(self) -> GcsStore:
        if self.gs is None:
            raise CampaignError(f"{self.uri} is a local campaign output, not gs://")
        if self._store is None:
            retry = self._retry if self._retry is not None else RetryPolicy.from_env()
            self._store = GcsStore(*self.gs, retry, workers=transfer_workers())
        return self._store

    def rel(self, path: Path) -> str:
        """``path`` (under :attr:`local`) relative to the root, as a posix path."""
        try:
            return path.absolute().relative_to(self.local).as_posix()
        except ValueError:
            raise CampaignError(f"{path} is not under the campaign's local root {self.local}") from None

    def uri_of(self, rel: str) -> str:
        """Where ``rel`` is published: its gs:// URI, or its local path."""
        return self.store().uri(rel) if self.gs is not None else str(self.local / rel)

    def path(self, rel: str) -> Path:
        """The local path of ``rel`` (final for a local root, staging for a gs:// one)."""
        return self.local / rel

    def publish(self, paths: Sequence[Path]) -> None:
        """Make the local files ``paths`` (under :attr:`local`) the root's: for gs:// each is uploaded as
        :class:`~rtscore.storage.rundir.RunDir` uploads an artifact (its sha256 in the object's metadata, a
        generation precondition on what was seen, in parallel), unless the bucket holds that content already. A
        local root has nothing to do."""
        if self.gs is None or not paths:
            return
        store = self.store()
        todo = []
        for p in paths:
            rel = self.rel(p)
            with os_errors("read", p):
                sha, size = sha256_file(p), p.stat().st_size
            blob = store.get(rel)
            if blob is not None and (blob.metadata or {}).get(SHA_KEY) == sha and blob.size == size:
                continue
            todo.append((p, rel, sha, int(blob.generation or 0) if blob is not None else 0))
        store.upload_many(todo)

    def delete(self, rel: str) -> None:
        """Remove ``rel`` (local copy and, for gs://, the object); absent is fine."""
        self.path(rel).unlink(missing_ok=True)
        if self.gs is not None:
            self.store().delete([rel])

    def fetch(self, rel: str) -> Path | None:
        """A local copy of ``rel``: the file itself for a local root; for gs:// the object downloaded into the
        mirror unless the mirror already holds its content (sha256 metadata). None when it does not exist."""
        local = self.path(rel)
        if self.gs is None:
            return local if local.is_file() else None
        store = self.store()
        blob = store.get(rel)
        if blob is None:
            return None
        want = (blob.metadata or {}).get(SHA_KEY)
        if local.is_file() and want is not None and local.stat().st_size == blob.size and sha256_file(local) == want:
            return local
        tmp = local.with_name(f".{local.name}.download")
        store.download_file(blob, rel, tmp)
        tmp.replace(local)
        return local


# ------------------------------------------------------------------------------------------- scene outputs
@dataclass(frozen=True)
class SceneOutputs:
    """Where one scene's outputs are written (local paths: final for a local root, staging for gs://):
    ``rts predict``'s names under ``<output>/scenes/<scene_id>/``, and the scene's parts file."""

    dir: Path
    prob: Path
    mask: Path
    manifest: Path
    parts: Path

    def files(self) -> list[Path]:
        return [self.prob, self.mask, self.manifest, self.parts]


def scene_outputs(output: str | Path | CampaignRoot, scene: Scene) -> SceneOutputs:
    root = output if isinstance(output, CampaignRoot) else CampaignRoot(output)
    d = root.local / SCENES_DIR / scene.scene_id
    names = _output_names(scene)
    return SceneOutputs(d, *(d / names[k] for k in OUTPUT_KINDS))


OUTPUT_KINDS = ("prob", "mask", "manifest", "parts")  # a scene's files, as SceneOutputs names them


def scene_rels(scene: Scene) -> dict[str, str]:
    """The scene's output files relative to the campaign root (posix), by kind: what :func:`scene_outputs` gives,
    without making paths (a campaign's index names 4 files of each of 10^5 scenes)."""
    names = _output_names(scene)
    return {k: f"{SCENES_DIR}/{scene.scene_id}/{names[k]}" for k in OUTPUT_KINDS}


def parts_rel(scene: Scene) -> str:
    """``scene_rels(scene)["parts"]``, alone (the finish looks up the parts file of each of 10^5 scenes)."""
    return f"{SCENES_DIR}/{scene.scene_id}/{_stem(scene.uri)}{PARTS_SUFFIX}"


def _output_names(scene: Scene) -> dict[str, str]:
    stem = _stem(scene.uri)  # predict_raster names its outputs after the input's stem
    return {
        "prob": f"{stem}_prob.tif",
        "mask": f"{stem}_mask.tif",
        "manifest": f"{stem}{MANIFEST_SUFFIX}",
        "parts": f"{stem}{PARTS_SUFFIX}",
    }


def _stem(uri: str) -> str:
    """``Path(uri).stem`` (``PurePosixPath`` for gs://) from string operations: ~20 times faster, and a campaign's
    finish takes the stem of each of 10^5 scenes."""
    name = uri.rstrip("/").rsplit("/", 1)[-1]
    dot = name.rfind(".")
    return name[:dot] if 0 < dot < len(name) - 1 else name


def finish_scene(root: CampaignRoot, scene: Scene, outs: SceneOutputs) -> None:
    """After ``rts predict`` wrote a scene's outputs into ``outs``: vectorise its mask and probability into its
    parts file (:func:`~rtscore.mapping.polygons.write_parts`, with the ground area of one pixel), then publish
    every file of the scene (:meth:`CampaignRoot.publish`). The caller appends the ``done`` record only after this
    returned: a worker killed in between leaves published files without a record, and the re-run maps the scene
    again, overwriting them.

    For a gs:// scene or root, the predict manifest names where things are for good (the scene's URI, the
    published outputs' URIs) instead of the staging paths, which are gone after the scene.
    """
    _write_scene_parts(outs.mask, outs.prob, outs.parts, scene.scene_id)
    if root.remote or scene.uri.startswith(GS):
        _name_for_good(root, scene, outs)
    root.publish(outs.files())


def _name_for_good(root: CampaignRoot, scene: Scene, outs: SceneOutputs) -> None:
    with os_errors("read", outs.manifest):
        manifest = PredictManifest.model_validate_json(outs.manifest.read_text())
    extra = manifest.extra_input
    if extra is not None and scene.uri.startswith(GS) and scene.extra is not None:
        extra = scene.extra.uri  # the object staged_input downloaded (pinned to its listed generation)
    named = manifest.model_copy(
        update={
            "input": scene.uri,
            "extra_input": extra,
            "prob": root.uri_of(root.rel(outs.prob)),
            "mask": root.uri_of(root.rel(outs.mask)),
        }
    )
    atomic_write_text(outs.manifest, named.model_dump_json(indent=2) + "\n")


def read_scene_parts(root: CampaignRoot, scene: Scene) -> tuple[SceneParts, float]:
    """A done scene's parts and the ground m² of one of its pixels, from its parts file (downloaded for gs://);
    rasters are not read. A scene mapped before parts files existed gets its file made once, from its rasters.

    Raises:
        CampaignError: neither the parts file nor the rasters are there.
    """
    outs = scene_outputs(root, scene)
    rel = root.rel(outs.parts)
    local = root.fetch(rel)
    if local is not None:
        return read_parts(local)
    mask, prob = (root.fetch(root.rel(p)) for p in (outs.mask, outs.prob))
    if mask is None or prob is None:
        raise CampaignError(
            f"scene {scene.scene_id} is done in the log but {root.uri_of(rel)} and its mask / probability rasters "
            "are missing; delete its log records or re-map it"
        )
    _log.warning("scene %s has no parts file (mapped by an older version): made from its rasters", scene.scene_id)
    got = _write_scene_parts(mask, prob, outs.parts, scene.scene_id)
    root.publish([outs.parts])
    return got


def _write_scene_parts(mask: Path, prob: Path, path: Path, scene_id: str) -> tuple[SceneParts, float]:
    """Vectorise a scene's mask and probability (:func:`~rtscore.mapping.polygons.scene_parts`) into its parts
    file, with the ground m² of one pixel (the mask's grid)."""
    import rasterio

    parts = scene_parts(mask, prob, scene_id)
    with rasterio.open(mask) as src:  # metadata only
        ground = ground_pixel_area_m2(src.crs, src.transform, src.height, src.width, what=str(mask))
    write_parts(path, parts, ground)
    return parts, ground


# ------------------------------------------------------------------------------------------- scene inputs
@contextlib.contextmanager
def staged_input(scene: Scene, extra_bands: bool, cache_dir: str | Path | None = None) -> Iterator[Path]:
    """The scene's raster as a local path for the time of the ``with``: a local scene in place; a gs:// scene
    downloaded (with its EXTRA raster when ``extra_bands``, where ``rts predict`` looks for it: the sibling
    ``<stem>_extra.tif``, or ``EXTRA/<name>`` for ``.../PLANET-RGB/<name>``) into a temporary directory under
    ``<cache>/staging/``, removed afterwards.

    Each download is pinned to the generation the listing recorded (``scene.identity.generation``, and the EXTRA
    raster's in ``scene.extra``: the scene is listed with ``list_scenes(..., extra=True)``).

    Raises:
        CampaignError: the scene or its EXTRA raster was rewritten or deleted since it was listed (naming the
            object and both generations), its EXTRA raster is missing, or the scene was listed without it.
        StorageError: a download failed after the retry policy gave up.
    """
    if not scene.uri.startswith(GS):
        yield Path(scene.uri)
        return
    bucket, name = parse_gs_uri(scene.uri)
    store = GcsStore(bucket, "", RetryPolicy.from_env(), workers=transfer_workers())
    want = scene.identity.generation
    base = (Path(cache_dir).expanduser().resolve() if cache_dir is not None else default_cache_dir()) / STAGING_DIR
    with os_errors("create a staging directory in", base):
        base.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{scene.scene_id}.", dir=base))
    try:
        obj = PurePosixPath(name)
        in_layout = obj.parent.name == RGB_DIR
        local = tmp / RGB_DIR / obj.name if in_layout else tmp / obj.name
        _download_pinned(store, scene.uri, name, want, local)
        if extra_bands:
            _stage_extra(store, scene, obj, local)
        yield local
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _download_pinned(store: GcsStore, uri: str, name: str, want: int | None, local: Path) -> None:
    """Download object ``name`` at generation ``want`` (the listing's) to ``local``."""
    blob = store.get(name)
    _check_generation(uri, want, blob)
    assert blob is not None  # checked just above
    try:
        store.download_file(blob, name, local)  # the blob carries its generation: the download asks for it
    except Exception:
        _check_generation(uri, want, store.get(name))  # rewritten in between: say so, else the download's error
        raise


def _check_generation(uri: str, want: int | None, blob: Blob | None) -> None:
    if blob is None:
        raise CampaignError(f"{uri}: deleted since the campaign listed it (generation {want}); re-run the campaign")
    got = int(blob.generation or 0)
    if want is not None and got != want:
        raise CampaignError(
            f"{uri}: rewritten since the campaign listed it (listed generation {want}, now generation {got}); "
            "re-run the campaign to map the new content"
        )


def _stage_extra(store: GcsStore, scene: Scene, obj: PurePosixPath, local: Path) -> None:
    """Download the EXTRA raster the listing found for ``obj`` (``scene.extra``), at the generation it listed, where
    ``rts predict`` (``extra_path_for``) finds it next to ``local``."""
    listed = scene.extra
    if listed is None:
        raise CampaignError(
            f"{scene.uri}: the package reads EXTRA bands but the scene was listed without its EXTRA raster "
            "(list_scenes(..., extra=True)), so its identity would not cover what is read"
        )
    remote, here = extra_candidates(obj), extra_candidates(local)
    if listed.identity is None:
        names = " or ".join(store.uri(str(r)) for r in remote)
        raise CampaignError(f"{scene.uri}: the package reads EXTRA bands and its EXTRA raster {names} does not exist")
    name = parse_gs_uri(listed.uri)[1]
    dst = here[remote.index(PurePosixPath(name))]
    _download_pinned(store, listed.uri, name, listed.identity.generation, dst)
