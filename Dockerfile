# Runtime image for Prefect workers (minimal for now; the CUDA runtime image comes with the orchestration issue).
FROM python:3.11.7-slim-bookworm

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
WORKDIR /opt/rts
COPY pyproject.toml constraints.txt README.md ./
COPY rtscore ./rtscore
COPY flows ./flows
COPY tasks ./tasks
COPY configs ./configs
COPY prefect.yaml ./
RUN pip install --no-cache-dir -c constraints.txt .

ENTRYPOINT ["rts"]
CMD ["--help"]
