"""Where a run's artifacts live: the run directory (local or ``gs://``), its layout, manifest and fingerprints.

- :mod:`~rtscore.storage.layout`: :class:`RunLayout`, every path of a run directory, once.
- :mod:`~rtscore.storage.rundir`: :class:`RunDir`, record / require / fetch / verify / adopt artifacts.
- :mod:`~rtscore.storage.bucket`: a gs:// run's manifest object and artifact objects.
- :mod:`~rtscore.storage.links`: the hard-linked copies of verified artifacts ``adopt`` makes.
- :mod:`~rtscore.storage.manifest`: the ``manifest.json`` models.
- :mod:`~rtscore.storage.files`: sha256 fingerprints of files and trees, atomic writes.
- :mod:`~rtscore.storage.gcs`: the ``gs://`` backend (google-cloud-storage imported on first use).
"""

from rtscore.storage.errors import StorageError
from rtscore.storage.files import (
    EMPTY_TREE,
    atomic_write_json,
    atomic_write_text,
    check_writable,
    fingerprint,
    os_errors,
    publish_dir,
    sha256_file,
    staged_dir,
    tree_digests,
    tree_fingerprint,
)
from rtscore.storage.layout import RunLayout, SweepLayout
from rtscore.storage.manifest import MANIFEST_NAME, ArtifactEntry, Manifest
from rtscore.storage.rundir import CACHE_ENV, RunDir, absolute_location, default_cache_dir

__all__ = [
    "CACHE_ENV",
    "EMPTY_TREE",
    "MANIFEST_NAME",
    "ArtifactEntry",
    "Manifest",
    "RunDir",
    "RunLayout",
    "StorageError",
    "SweepLayout",
    "absolute_location",
    "atomic_write_json",
    "atomic_write_text",
    "check_writable",
    "default_cache_dir",
    "fingerprint",
    "os_errors",
    "publish_dir",
    "sha256_file",
    "staged_dir",
    "tree_digests",
    "tree_fingerprint",
]
