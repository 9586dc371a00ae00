"""The commit of the running code: the checkout's git, else the image's build argument, else 'unknown'."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rtscore.identity.commit import (
    GIT_DIRTY_ENV,
    GIT_SHA_ENV,
    UNKNOWN_COMMIT,
    CodeCommit,
    CommitError,
    code_commit,
)

IMAGE_SHA = "0123456789abcdef0123456789abcdef01234567"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A git checkout with one commit, holding a project directory at its top level."""
    root = tmp_path / "checkout"
    root.mkdir()
    git(root, "init", "-q")
    (root / "tracked.txt").write_text("a\n")
    git(root, "add", "tracked.txt")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    return root


def test_a_checkout_wins_over_the_image_variable_and_reports_dirty(checkout: Path) -> None:
    head = git(checkout, "rev-parse", "HEAD")
    env = {GIT_SHA_ENV: IMAGE_SHA}
    assert code_commit(env, checkout) == CodeCommit(head, False, "checkout")
    (checkout / "untracked.txt").write_text("x")  # untracked files do not make it dirty
    assert code_commit(env, checkout).dirty is False
    (checkout / "tracked.txt").write_text("b\n")
    assert code_commit(env, checkout) == CodeCommit(head, True, "checkout")


def test_without_a_checkout_the_image_variable_is_the_commit(tmp_path: Path) -> None:
    assert code_commit({GIT_SHA_ENV: IMAGE_SHA}, tmp_path) == CodeCommit(IMAGE_SHA, None, "image")
    dirty = code_commit({GIT_SHA_ENV: IMAGE_SHA.upper(), GIT_DIRTY_ENV: "true"}, tmp_path)
    assert dirty == CodeCommit(IMAGE_SHA, True, "image") and "from the image, dirty" in dirty.describe()


@pytest.mark.parametrize("env", [{}, {GIT_SHA_ENV: ""}, {GIT_SHA_ENV: " ", GIT_DIRTY_ENV: ""}])
def test_an_image_built_without_the_argument_claims_no_commit(tmp_path: Path, env: dict[str, str]) -> None:
    commit = code_commit(env, tmp_path)
    assert commit == CodeCommit(UNKNOWN_COMMIT, None, "none") and not commit.known
    assert "--build-arg GIT_SHA" in commit.describe()


def test_an_installed_copy_inside_another_repository_does_not_take_its_commit(checkout: Path) -> None:
    """rtscore installed into site-packages of a venv inside some repository is not that repository's code."""
    site = checkout / ".venv" / "site-packages"
    site.mkdir(parents=True)
    assert code_commit({}, site).source == "none"
    assert code_commit({GIT_SHA_ENV: IMAGE_SHA}, site).source == "image"


@pytest.mark.parametrize(
    ("env", "match"),
    [
        ({GIT_SHA_ENV: IMAGE_SHA[:12]}, "RTS_GIT_SHA must be a full commit sha.*rev-parse HEAD"),
        ({GIT_SHA_ENV: "$(git rev-parse HEAD)"}, "RTS_GIT_SHA must be a full commit sha"),
        ({GIT_SHA_ENV: IMAGE_SHA, GIT_DIRTY_ENV: "yes"}, "RTS_GIT_DIRTY must be 'true', 'false' or empty"),
    ],
)
def test_a_malformed_build_argument_is_an_error_not_a_recorded_value(
    tmp_path: Path, env: dict[str, str], match: str
) -> None:
    with pytest.raises(CommitError, match=match):
        code_commit(env, tmp_path)
