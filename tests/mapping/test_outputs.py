"""A scene's output names (rtscore.mapping.outputs)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from rtscore.mapping.outputs import _stem


@pytest.mark.parametrize(
    "uri",
    [
        "/a/b/c.tif",
        "c.tif",
        "/a/b.c/d",
        "/a/.hidden",
        "/a/x.",
        "/a/b/c.tif/",
        "rel/x.y.z",
        "/a//b.tif",
        "x",
        "gs://b/p/q.tif",
        "gs://b/p/q.tar.gz",
    ],
)
def test_a_scenes_stem_is_the_one_pathlib_gives(uri: str) -> None:
    """Output files are named after the input's stem (as rts predict names them); the finish takes it for 10^5
    scenes with string operations, which must agree with pathlib's."""
    want = PurePosixPath(uri).stem if uri.startswith("gs://") else Path(uri).stem
    assert _stem(uri) == want
