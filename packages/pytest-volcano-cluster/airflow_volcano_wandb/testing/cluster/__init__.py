"""A local Kubernetes control plane with Volcano and KWOK-simulated GPU nodes, as processes.

``python -m airflow_volcano_wandb.testing.cluster up|down|status --state-dir DIR``; from
Python, :func:`up` / :func:`down` / :func:`status`. See ``docs/local-cluster.md``.
"""

from airflow_volcano_wandb.testing.cluster.build import BuildError
from airflow_volcano_wandb.testing.cluster.cluster import (
    AUDIT_LOG_ENV,
    DEFAULT_GPUS_PER_NODE,
    DEFAULT_NODES,
    REAL_NODE_ENV,
    ClusterError,
    ClusterInfo,
    down,
    is_running,
    status,
    up,
)
from airflow_volcano_wandb.testing.cluster.manifests import GPU_RESOURCE, NODE_LABEL
from airflow_volcano_wandb.testing.cluster.podlogs import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
)

__all__ = [
    "AUDIT_LOG_ENV",
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_NODES",
    "DURATION_ANNOTATION",
    "EXIT_CODE_ANNOTATION",
    "GPU_RESOURCE",
    "NODE_LABEL",
    "REAL_NODE_ENV",
    "BuildError",
    "ClusterError",
    "ClusterInfo",
    "down",
    "is_running",
    "status",
    "up",
]
