"""The worker image cannot be built here (no registry for base images): check the Dockerfile statically."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def test_base_image_is_pinned_to_an_exact_python_release() -> None:
    froms = [arg for op, arg in _instructions() if op == "FROM"]
    assert len(froms) == 1
    image = froms[0]
    assert not image.endswith(":latest") and ":" in image
    m = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-[a-z0-9-]+(@sha256:[0-9a-f]{64})?", image)
    assert m, f"base image {image!r} must be an exact python X.Y.Z tag (optionally with a digest)"
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert f"{m.group(1)}.{m.group(2)}" in requires


def test_project_is_installed_with_the_exact_pins_and_rts_is_on_path() -> None:
    ins = _instructions()
    runs = [arg for op, arg in ins if op == "RUN"]
    install = next(r for r in runs if "pip install" in r)
    assert "-c constraints.txt" in install and re.search(r"pip install .*\s\.(\s|$)", install)
    assert "rts --help" in install, "the build proves `rts` is on PATH"
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["rts"] == "flows.cli.main:main"
    # Every package of the wheel is copied before the install.
    copied_before = set()
    for op, arg in ins:
        if op == "RUN" and arg == install:
            break
        if op == "COPY":
            copied_before.update(shlex.split(arg)[:-1])
    for pkg in ("rtscore", "flows", "tasks", "pyproject.toml", "constraints.txt"):
        assert pkg in copied_before
    for op, arg in ins:
        if op == "COPY":
            for src in shlex.split(arg)[:-1]:
                assert (ROOT / src).exists(), f"COPY {src}: not in the repository"
    cmd = next(arg for op, arg in ins if op == "CMD")
    assert cmd.startswith('["rts"')


def test_image_is_cuda_capable_and_usable_by_a_prefect_worker() -> None:
    ins = _instructions()
    env = " ".join(arg for op, arg in ins if op == "ENV")
    assert "NVIDIA_VISIBLE_DEVICES=all" in env and "compute" in env
    pins = (ROOT / "constraints.txt").read_text()
    assert "torch==2.14.1" in pins and "nvidia-cuda-runtime==" in pins and "nvidia-cudnn-cu13==" in pins
    assert not any(op == "ENTRYPOINT" for op, _ in ins), "an ENTRYPOINT would swallow the worker's command"
    # prefect.yaml's pull step changes into $RTS_PROJECT_DIR: the image must set it to where the code is.
    workdir = next(arg for op, arg in ins if op == "WORKDIR")
    assert f"RTS_PROJECT_DIR={workdir}" in env
    assert "RTS_PROJECT_DIR" in (ROOT / "prefect.yaml").read_text()
    users = [arg for op, arg in ins if op == "USER"]
    assert users and users[-1] not in ("root", "0")


def test_image_fixes_the_python_hash_seed_of_the_guide() -> None:
    """Guide §2.2: hash seed 42. Python reads PYTHONHASHSEED at interpreter start-up only, so the image's
    environment must carry it (a run-time os.environ assignment cannot reach the running interpreter)."""
    env = " ".join(arg for op, arg in _instructions() if op == "ENV")
    assert "PYTHONHASHSEED=42" in env.split()


def test_the_image_records_the_commit_it_was_built_from() -> None:
    """Guide §4.3 git_sha, §10.1: the image holds no .git (.dockerignore), so the commit comes in as a build argument
    and is exported under the name the resolver reads (rtscore/identity/commit.py); its default claims none, and
    every documented build command passes it."""
    assert ".git" in (ROOT / ".dockerignore").read_text().split()
    ins = _instructions()
    args = dict(shlex.split(arg)[0].partition("=")[::2] for op, arg in ins if op == "ARG")
    assert args.get("GIT_SHA") == "" and args.get("GIT_DIRTY") == "", "no default: a build without it claims none"
    env = {k: v for op, arg in ins if op == "ENV" for k, _, v in (w.partition("=") for w in shlex.split(arg))}
    assert env.get("RTS_GIT_SHA") == "${GIT_SHA}", "exported for runs: an ARG alone is gone after the build"
    from rtscore.identity.commit import GIT_DIRTY_ENV, GIT_SHA_ENV  # the names the resolver reads

    assert env[GIT_SHA_ENV] == "${GIT_SHA}" and env[GIT_DIRTY_ENV] == "${GIT_DIRTY}"
    order = [op for op, _ in ins]
    arg_at = next(i for i, (op, arg) in enumerate(ins) if op == "ARG" and arg.startswith("GIT_SHA"))
    assert arg_at > order.index("RUN"), "after the dependency install: a new commit rebuilds no earlier layer"
    check = next(arg for op, arg in ins[arg_at:] if op == "RUN")
    assert check == "python -m rtscore.identity.commit", "the build checks the value and prints what runs record"
    build = "--build-arg GIT_SHA=$(git rev-parse HEAD)"
    for doc in ("Dockerfile", "docs/cloud.md"):
        commands = re.findall(r"^[#\s]*(docker build\s.*)$", (ROOT / doc).read_text(), re.MULTILINE)
        assert commands and all(c.startswith(f"docker build {build}") for c in commands), f"{doc}: {commands}"
