"""pytest plugin (entry point ``volcano_cluster``): a real local Volcano cluster for tests.

Fixtures:

- ``volcano_cluster`` (session): a running cluster. If ``AVW_CLUSTER_STATE_DIR`` names the
  state dir of a running cluster it is reused and left running; otherwise one is started in
  ``--volcano-cluster-dir`` (default: a fresh temporary directory) and stopped at the end.
- ``volcano_namespace`` (function): a fresh namespace, deleted after the test.

The plugin only starts a cluster, or even imports its modules, when a test asks for one of
these fixtures; its command-line options are all ``--volcano-cluster-*``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from airflow_volcano_wandb.testing.cluster import ClusterInfo

STATE_DIR_ENV = "AVW_CLUSTER_STATE_DIR"
NODES_ENV = "AVW_CLUSTER_NODES"
GPUS_ENV = "AVW_CLUSTER_GPUS_PER_NODE"


@dataclass
class VolcanoCluster:
    """Handle on a running local cluster."""

    state_dir: Path
    kubeconfig: Path
    server: str
    nodes: int
    gpus_per_node: int
    owned: bool
    #: The apiserver's audit log, when the cluster writes one (``AVW_CLUSTER_AUDIT_LOG``).
    audit_log: Path | None = None
    #: Whether the cluster has the real node (``AVW_CLUSTER_REAL_NODE``, docs/local-cluster.md).
    real_node: bool = False
    _namespaces: list[str] = field(default_factory=list)

    @classmethod
    def from_info(cls, info: ClusterInfo, *, owned: bool) -> VolcanoCluster:
        """A handle on the cluster ``cluster.up`` answered with, each of its fields;
        ``owned``: stopped by its fixture."""
        return cls(**{f.name: getattr(info, f.name) for f in fields(info)}, owned=owned)

    def api_client(self) -> ApiClient:
        """A new ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def create_namespace(self, prefix: str = "test") -> str:
        """Create ``<prefix>-<random>`` and wait for its ``default`` service account.

        Pods are refused until that account exists, so returning earlier would make the
        first pod of a test fail for a reason that has nothing to do with the test.
        """
        from kubernetes import client

        # Namespace names are DNS labels: lower-case alphanumerics and "-", at most 63.
        clean = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-")[:40].rstrip("-")
        name = f"{clean or 'test'}-{uuid.uuid4().hex[:6]}"
        with self.api_client() as api:
            core = client.CoreV1Api(api)
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
            deadline = time.monotonic() + 30
            while True:
                accounts = core.list_namespaced_service_account(name).items
                if any(sa.metadata.name == "default" for sa in accounts):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"namespace {name}: no default service account after 30s")
                time.sleep(0.1)
        self._namespaces.append(name)
        return name

    def delete_namespace(self, name: str) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        with self.api_client() as api:
            try:
                client.CoreV1Api(api).delete_namespace(name)
            except ApiException as err:
                if err.status != 404:
                    raise


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("volcano_cluster", "local Volcano cluster")
    group.addoption(
        "--volcano-cluster-dir",
        default=None,
        help=f"state dir for the cluster this session starts (a running one given by "
        f"${STATE_DIR_ENV} is reused instead)",
    )
    group.addoption(
        "--volcano-cluster-keep",
        action="store_true",
        help=f"leave the cluster this session started running (reuse it via ${STATE_DIR_ENV})",
    )


@pytest.fixture(scope="session")
def volcano_cluster(request: pytest.FixtureRequest) -> Iterator[VolcanoCluster]:
    # Imported here: installing the provider loads this plugin into every pytest run of its
    # users, which must not pay for the cluster's modules (cryptography, YAML) unless asked.
    from airflow_volcano_wandb.testing import cluster as local_cluster

    reuse = os.environ.get(STATE_DIR_ENV)
    if reuse and local_cluster.is_running(Path(reuse)):
        # Someone else owns it (e.g. `make cluster-up`): use it, never stop it.
        yield VolcanoCluster.from_info(local_cluster.up(Path(reuse)), owned=False)
        return

    option: Any = request.config.getoption("--volcano-cluster-dir")
    temporary = not (reuse or option)
    state_dir = Path(reuse or option or tempfile.mkdtemp(prefix="avw-cluster-"))
    keep = request.config.getoption("--volcano-cluster-keep")
    info = local_cluster.up(
        state_dir,
        nodes=_env_int(NODES_ENV, local_cluster.DEFAULT_NODES),
        gpus_per_node=_env_int(GPUS_ENV, local_cluster.DEFAULT_GPUS_PER_NODE),
        audit_log=bool(os.environ.get(local_cluster.AUDIT_LOG_ENV)),
        real_node=bool(os.environ.get(local_cluster.REAL_NODE_ENV)),
    )
    try:
        yield VolcanoCluster.from_info(info, owned=True)
    finally:
        if not keep:
            local_cluster.down(state_dir)
            # A temporary dir goes too, unless a failure may need its component logs.
            if temporary and not request.session.testsfailed:
                shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture
def volcano_namespace(
    volcano_cluster: VolcanoCluster, request: pytest.FixtureRequest
) -> Iterator[str]:
    name = volcano_cluster.create_namespace(request.node.name.removeprefix("test_")[:30])
    try:
        yield name
    finally:
        volcano_cluster.delete_namespace(name)
