"""The commit the running code was built from (guide §4.3 ``git_sha``, §10.1 "Git commit hash recorded").

One owner for packages (``run_metadata.json``) and MLflow runs: the git checkout the ``rtscore`` package runs from
when there is one, else the commit the worker image was built from (``docker build --build-arg GIT_SHA=...`` sets
:data:`GIT_SHA_ENV`; the image holds no ``.git``), else ``unknown``. An image built without the argument records
``unknown``: nothing guesses a commit.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rtscore.errors import PipelineError
from rtscore.identity.code import PROJECT_ROOT

GIT_SHA_ENV = "RTS_GIT_SHA"  # the image's commit: Dockerfile `ARG GIT_SHA` -> `ENV RTS_GIT_SHA`
GIT_DIRTY_ENV = "RTS_GIT_DIRTY"  # `true`/`false`: uncommitted changes to tracked files when the image was built
UNKNOWN_COMMIT = "unknown"

CommitSource = Literal["checkout", "image", "none"]
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a full SHA-1 or SHA-256 object name, never an abbreviation


class CommitError(PipelineError, ValueError):
    """The image's commit variables are malformed (a wrong ``docker build --build-arg``); the message names them."""


@dataclass(frozen=True)
class CodeCommit:
    """Where the running code comes from: ``sha`` (``unknown`` when ``source`` is ``none``), ``dirty`` (uncommitted
    changes to tracked files; None: not known) and ``source`` (``checkout``: git of the running checkout;
    ``image``: :data:`GIT_SHA_ENV`, set when the image was built; ``none``: neither)."""

    sha: str
    dirty: bool | None
    source: CommitSource

    @property
    def known(self) -> bool:
        return self.source != "none"

    def describe(self) -> str:
        """One line for logs: ``<sha> (from the image, dirty)``, or why there is none."""
        if not self.known:
            hint = "build the image with --build-arg GIT_SHA"
            return f"{UNKNOWN_COMMIT} (no git checkout, and {GIT_SHA_ENV} is not set: {hint})"
        state = {True: ", dirty", False: ", clean", None: ""}[self.dirty]
        return f"{self.sha} (from the {self.source}{state})"


def code_commit(env: Mapping[str, str] | None = None, root: Path = PROJECT_ROOT) -> CodeCommit:
    """The commit of the running code: the checkout at ``root`` (the directory holding ``rtscore``), else the image's
    :data:`GIT_SHA_ENV` / :data:`GIT_DIRTY_ENV` from ``env`` (default ``os.environ``), else ``unknown``.

    Raises:
        CommitError: :data:`GIT_SHA_ENV` is set but not a full commit sha, or :data:`GIT_DIRTY_ENV` is not
            ``true``/``false`` (a wrong image build argument is an error, not a recorded value).
    """
    checkout = checkout_commit(root)
    if checkout is not None:
        return checkout
    image = image_commit(os.environ if env is None else env)
    return image if image is not None else CodeCommit(UNKNOWN_COMMIT, None, "none")


def checkout_commit(root: Path) -> CodeCommit | None:
    """HEAD and dirtiness of the git checkout whose top level is ``root``; None without git or such a checkout.

    Only a checkout rooted at ``root`` counts: an installed copy of ``rtscore`` (site-packages) inside some other
    repository must not take that repository's commit."""
    try:
        top, sha = _git(root, "rev-parse", "--show-toplevel", "HEAD").splitlines()
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError, ValueError):  # ValueError: not two lines
        return None
    if Path(top).resolve() != root.resolve() or not _SHA.fullmatch(sha):
        return None
    return CodeCommit(sha, bool(status.strip()), "checkout")


def image_commit(env: Mapping[str, str]) -> CodeCommit | None:
    """The commit the image was built from (:data:`GIT_SHA_ENV`, :data:`GIT_DIRTY_ENV`); None when not set or empty
    (an image built without ``--build-arg GIT_SHA``)."""
    sha = env.get(GIT_SHA_ENV, "").strip().lower()
    if not sha:
        return None
    if not _SHA.fullmatch(sha):
        raise CommitError(
            f"{GIT_SHA_ENV} must be a full commit sha (40 hex digits, as `git rev-parse HEAD` prints); got {sha!r}. "
            "hint: rebuild the image with --build-arg GIT_SHA=$(git rev-parse HEAD)"
        )
    dirty = env.get(GIT_DIRTY_ENV, "").strip().lower()
    if dirty not in ("", "true", "false"):
        raise CommitError(f"{GIT_DIRTY_ENV} must be 'true', 'false' or empty; got {dirty!r}")
    return CodeCommit(sha, None if not dirty else dirty == "true", "image")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10, check=True
    ).stdout


if __name__ == "__main__":  # the Dockerfile's build check: a malformed GIT_SHA fails the build, and it says what runs
    print(f"rts code commit: {code_commit().describe()}")
