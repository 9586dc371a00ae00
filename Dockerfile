# CUDA-capable runtime image for Prefect workers (process, Docker, Kubernetes or Vertex AI work pools).
#
# torch 2.14.1 on Linux x86_64 is the CUDA 13.0 build and carries the CUDA runtime, cuBLAS and cuDNN as
# pip packages (nvidia-*-cu13, pinned in constraints.txt), so the base image needs only a matching
# Python: the host's NVIDIA driver (>= 580 for CUDA 13.0) is mounted into the container by the NVIDIA
# container toolkit (`docker run --gpus all`, the GKE/Vertex AI GPU node images), as the NVIDIA_* variables
# below request. Build and push from the checkout (see docs/cloud.md, "The worker image"):
#
#   docker build --build-arg GIT_SHA=$(git rev-parse HEAD) \
#       --build-arg GIT_DIRTY=$(git diff --quiet HEAD && echo false || echo true) \
#       -t REGION-docker.pkg.dev/PROJECT/rts/rts-pipeline:$(git rev-parse --short HEAD) .
#   docker push REGION-docker.pkg.dev/PROJECT/rts/rts-pipeline:$(git rev-parse --short HEAD)
#
# The base image is pinned to an exact release; pin its digest too where your registry policy asks for it
# (`docker buildx imagetools inspect python:3.11.7-slim-bookworm` prints it): FROM python:3.11.7-slim-bookworm@sha256:...
FROM python:3.11.7-slim-bookworm

# PYTHONHASHSEED=42 (guide §2.2): Python reads it only at start-up, so it belongs in the image's environment.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONHASHSEED=42 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    RTS_PROJECT_DIR=/opt/rts \
    RTS_CACHE_DIR=/var/cache/rts

WORKDIR /opt/rts

# Dependencies first (exact pins), so code changes do not re-download torch.
COPY pyproject.toml constraints.txt README.md ./
COPY rtscore ./rtscore
COPY flows ./flows
COPY tasks ./tasks
RUN pip install -c constraints.txt . \
    && rts --help > /dev/null

COPY configs ./configs
COPY deployments ./deployments
COPY prefect.yaml ./

RUN useradd --create-home --uid 1000 rts \
    && mkdir -p /var/cache/rts /opt/rts/artifacts \
    && chown -R rts:rts /var/cache/rts /opt/rts/artifacts
USER rts

# The commit the image is built from (guide §4.3 run_metadata.json git_sha, §10.1 "Git commit hash recorded"):
# .dockerignore keeps .git out of the image, so the build passes it. Packages and MLflow runs record RTS_GIT_SHA
# (and RTS_GIT_DIRTY) with git_source 'image' (rtscore/identity/commit.py); built without --build-arg GIT_SHA
# they record 'unknown', never a guessed commit. Last, so a new commit rebuilds no earlier layer. The check
# fails the build on a malformed value (a short sha) and prints what runs will record.
ARG GIT_SHA=""
ARG GIT_DIRTY=""
ENV RTS_GIT_SHA=${GIT_SHA} \
    RTS_GIT_DIRTY=${GIT_DIRTY}
RUN python -m rtscore.identity.commit

# No ENTRYPOINT: Prefect workers run their own command in the container (`prefect flow-run execute`),
# which an ENTRYPOINT would swallow. `docker run IMAGE` prints the rts help; `docker run IMAGE rts run ...` works.
CMD ["rts", "--help"]
