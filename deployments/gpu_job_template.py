"""Add GPU job variables to a Kubernetes work pool's base job template (stdin -> stdout, JSON).

The `gpu` deployments of prefect.yaml set `accelerator_type` and `accelerator_count` (the names a Vertex AI
pool uses). A Kubernetes pool knows neither; this adds both to its template's variables and wires them into
the job manifest: a node selector on `cloud.google.com/gke-accelerator` (GKE's GPU node label; value e.g.
`nvidia-l4`) and an `nvidia.com/gpu` resource limit, plus a toleration of the GPU node taint.

    prefect work-pool get-default-base-job-template --type kubernetes \\
        | python deployments/gpu_job_template.py > gpu-kubernetes.json
    prefect work-pool create gpu --type kubernetes --base-job-template gpu-kubernetes.json
"""

from __future__ import annotations

import json
import sys
from typing import Any

VARIABLES: dict[str, dict[str, Any]] = {
    "accelerator_type": {
        "title": "Accelerator type",
        "description": "GPU node label value (cloud.google.com/gke-accelerator), e.g. nvidia-l4, nvidia-tesla-t4.",
        "type": "string",
        "default": "nvidia-l4",
    },
    "accelerator_count": {
        "title": "Accelerator count",
        "description": "GPUs per flow run (the nvidia.com/gpu limit of the job's container).",
        "type": "integer",
        "minimum": 1,
        "default": 1,
    },
}


def add_gpu_variables(template: dict[str, Any]) -> dict[str, Any]:
    """The template with the GPU variables and their use in ``job_configuration.job_manifest``."""
    out = json.loads(json.dumps(template))
    props = out.setdefault("variables", {}).setdefault("properties", {})
    for name, schema in VARIABLES.items():
        props.setdefault(name, schema)
    try:
        pod = out["job_configuration"]["job_manifest"]["spec"]["template"]["spec"]
        container = pod["containers"][0]
    except (KeyError, IndexError, TypeError):
        raise SystemExit("not a Kubernetes base job template (no job_configuration.job_manifest pod spec)") from None
    pod.setdefault("nodeSelector", {})["cloud.google.com/gke-accelerator"] = "{{ accelerator_type }}"
    tolerations = pod.setdefault("tolerations", [])
    gpu_taint = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    if gpu_taint not in tolerations:
        tolerations.append(gpu_taint)
    container.setdefault("resources", {}).setdefault("limits", {})["nvidia.com/gpu"] = "{{ accelerator_count }}"
    return out


def main() -> int:
    json.dump(add_gpu_variables(json.load(sys.stdin)), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
