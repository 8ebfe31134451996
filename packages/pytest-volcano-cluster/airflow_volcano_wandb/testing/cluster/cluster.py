"""``up`` / ``down`` / ``status`` for one local cluster living in a state directory.

Layout of ``DIR``: ``kubeconfig``, ``state.json`` (ports, sizes), ``pki/``, ``etcd/``,
``logs/<component>.log``, ``run/<component>.pid``, ``podlogs/`` and the generated configs;
with ``audit_log=True`` also ``logs/audit.log`` (the apiserver's audit log, JSON lines).
Each ``up`` after a ``down`` starts from an empty etcd: the cluster is a test fixture.
The components' command lines are :mod:`.components`'; starting them and their readiness
probes, :mod:`.startup`'s.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster import (
    build,
    image,
    in_cluster,
    manifests,
    node,
    process,
)
from airflow_volcano_wandb.testing.cluster.certs import PKI, ensure_pki
from airflow_volcano_wandb.testing.cluster.components import (
    START_ORDER,
    audit_args,
    component_argv,
)
from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError
from airflow_volcano_wandb.testing.cluster.startup import (
    ClusterError,
    Starter,
    apply_crds,
    crds_established,
    default_sa,
    http_ok,
    nodes_ready,
    queue_open,
    say,
    tls_answers,
    webhook_defaults_jobs,
)
from airflow_volcano_wandb.versions import VOLCANO_VERSION

DEFAULT_NODES = 4
DEFAULT_GPUS_PER_NODE = 8
#: Set (to anything) to start clusters with the apiserver's audit log (``up --audit-log``).
AUDIT_LOG_ENV = "AVW_CLUSTER_AUDIT_LOG"
#: Set (to anything) to start clusters with the real node (``up --real-node``).
REAL_NODE_ENV = "AVW_CLUSTER_REAL_NODE"


@dataclass(frozen=True)
class ClusterInfo:
    state_dir: Path
    kubeconfig: Path
    server: str
    nodes: int
    gpus_per_node: int
    #: The apiserver's audit log (JSON lines, Metadata level), when started with one.
    audit_log: Path | None = None
    #: Whether the cluster has the real node (``up --real-node``, :mod:`.node`).
    real_node: bool = False


def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def _load_state(state_dir: Path) -> dict[str, Any] | None:
    try:
        return json.loads(_state_file(state_dir).read_text())
    except (OSError, ValueError):
        return None


def _info(state_dir: Path, state: dict[str, Any]) -> ClusterInfo:
    return ClusterInfo(
        state_dir=state_dir,
        kubeconfig=state_dir / "kubeconfig",
        server=state["server"],
        nodes=state["nodes"],
        gpus_per_node=state["gpus_per_node"],
        audit_log=Path(state["audit_log"]) if state.get("audit_log") else None,
        real_node=bool(state.get("real_node")),
    )


def admin_client(state_dir: Path, server: str) -> Kube:
    pki = PKI(state_dir / "pki")
    return Kube(server, pki.ca, pki.cert("admin"), pki.key("admin"))


def _components(state: dict[str, Any]) -> tuple[str, ...]:
    return START_ORDER + (node.COMPONENTS if state.get("real_node") else ())


def is_running(state_dir: Path) -> bool:
    """True if every component runs and the apiserver answers /readyz."""
    state = _load_state(state_dir)
    if not state or any(process.running_pid(state_dir, c) is None for c in _components(state)):
        return False
    try:
        return admin_client(state_dir, state["server"]).text("/readyz") == "ok"
    except (OSError, KubeError):
        return False


def up(
    state_dir: Path,
    nodes: int = DEFAULT_NODES,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    timeout: float = 180.0,
    audit_log: bool = False,
    real_node: bool = False,
) -> ClusterInfo:
    """Build what is missing, start every component and wait until the cluster is usable.

    :param state_dir: where the cluster lives (see the module docstring).
    :param nodes: simulated GPU nodes.
    :param gpus_per_node: ``nvidia.com/gpu`` of each node.
    :param timeout: seconds to wait for readiness (the build is not counted).
    :param audit_log: run the kube-apiserver with an audit log at Metadata level, in
        ``logs/audit.log`` (``ClusterInfo.audit_log``). A running cluster is returned as it
        is, with or without one.
    :param real_node: add the real node (:mod:`.node`): a kubelet on containerd whose pods
        run, with the trainer image built (cached) and imported. Needs root, the Debian
        packages ``containerd``, ``runc``, ``containernetworking-plugins`` and ``mmdebstrap``.
    """
    state_dir = state_dir.resolve()
    state = _load_state(state_dir)
    if state and is_running(state_dir):
        if real_node and not state.get("real_node"):
            raise ClusterError(
                "kube-apiserver",
                "running without the real node; `down` it first to start it with one",
                state_dir,
            )
        say(f"already running: {state_dir / 'kubeconfig'}")
        return _info(state_dir, state)
    down(state_dir, quiet=True)  # leftovers of a half-started or crashed cluster

    bins = build.ensure_binaries()
    images = _node_images() if real_node else {}
    started_at = time.monotonic()
    for sub in ("etcd", "logs", "run", "podlogs", "node"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "logs").mkdir()
    pki = ensure_pki(state_dir / "pki")
    port_names = (
        "etcd",
        "etcd_peer",
        "apiserver",
        "webhook",
        "webhook_healthz",
        "kwok",
        "scheduler_metrics",
        "scheduler_healthz",
        "controller_metrics",
        "controller_healthz",
        "kubelet",
        "kubelet_healthz",
        "coredns_ready",
        "kube_proxy_healthz",
        "kube_proxy_metrics",
    )
    ports = dict(zip(port_names, process.free_ports(len(port_names)), strict=True))
    server = f"https://127.0.0.1:{ports['apiserver']}"
    (state_dir / "kubeconfig").write_text(manifests.kubeconfig(server, pki))
    (state_dir / "kubeconfig").chmod(0o600)
    default_log = state_dir / "podlogs" / "default.log"
    default_log.parent.mkdir(parents=True)
    default_log.write_text(
        "2000-01-01T00:00:00.000000000Z stdout F [sim] no per-pod log was written for this pod\n"
    )
    (state_dir / "kwok.yaml").write_text(manifests.kwok_config(default_log))
    (state_dir / "volcano-scheduler.conf").write_text(manifests.SCHEDULER_CONF)
    state = {"server": server, "ports": ports, "nodes": nodes, "gpus_per_node": gpus_per_node}
    if audit_log:
        state["audit_log"] = str(state_dir / "logs" / "audit.log")
    if real_node:
        state["real_node"] = True
    _state_file(state_dir).write_text(json.dumps(state, indent=2))

    argv = component_argv(bins, state_dir, pki, ports)
    if audit_log:
        argv["kube-apiserver"] += audit_args(state_dir)
    if real_node:
        argv["kube-apiserver"] = in_cluster.apiserver_argv(argv["kube-apiserver"])
        # Cluster DNS answers from EndpointSlices, which only the first fills; the second
        # binds the claims the real node's pods keep their W&B files on (placement.wandb_dir).
        extra = ",endpointslice-controller,persistentvolume-binder-controller"
        argv["kube-controller-manager"] = [
            a + extra if a.startswith("--controllers=") else a
            for a in argv["kube-controller-manager"]
        ]
    starter = Starter(state_dir, time.monotonic() + timeout)
    kube = admin_client(state_dir, server)
    try:
        starter.start("etcd", argv["etcd"])
        starter.wait(
            "etcd", "etcd health", lambda: http_ok(f"http://127.0.0.1:{ports['etcd']}/health")
        )
        starter.start("kube-apiserver", argv["kube-apiserver"])
        starter.wait("kube-apiserver", "/readyz", lambda: kube.text("/readyz") == "ok")

        crds = apply_crds(kube)
        starter.wait("kube-apiserver", "CRDs established", lambda: crds_established(kube, crds))
        for collection, obj in manifests.webhook_configurations(ports["webhook"], pki):
            kube.apply(collection, obj)
        kube.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "volcano-system"}},
        )
        kube.apply(
            "/apis/apps/v1/namespaces/volcano-system/deployments",
            manifests.volcano_release_record(VOLCANO_VERSION),
        )
        for index in range(nodes):
            kube.create("/api/v1/nodes", manifests.node(index, gpus_per_node))

        for name in START_ORDER[2:]:
            starter.start(name, argv[name])
        starter.wait(
            "kube-controller-manager", "the default service account", lambda: default_sa(kube)
        )
        starter.wait("kwok", f"{nodes} Ready nodes", lambda: nodes_ready(kube, nodes))
        starter.wait(
            "vc-webhook-manager", "the webhook port", lambda: tls_answers(ports["webhook"])
        )
        starter.wait(
            "vc-controller-manager", "the default queue to be Open", lambda: queue_open(kube)
        )
        starter.wait(
            "vc-webhook-manager",
            "a job to be defaulted by the webhook",
            lambda: webhook_defaults_jobs(kube),
        )
        if real_node:
            _start_real_node(starter, kube, ports, images)
    except BaseException:
        # Nothing may keep running after a failed `up`; the logs stay for the post-mortem.
        down(state_dir, quiet=True)
        raise
    say(
        f"ready in {time.monotonic() - started_at:.1f}s "
        f"({nodes} nodes x {gpus_per_node} {manifests.GPU_RESOURCE}"
        + (f" + real node {node.NODE_NAME})" if real_node else ")")
    )
    return _info(state_dir, state)


def _node_images() -> dict[str, Path]:
    """The real node's images as docker-archive tars, built (or found cached) before start."""
    pause = build.ensure_node_binaries()["pause"]
    build.build_component(in_cluster.KUBE_PROXY)
    return {"pause": image.pause_image(pause), "trainer": image.trainer_image()}


def _start_real_node(
    starter: Starter, kube: Kube, ports: dict[str, int], images: dict[str, Path]
) -> None:
    state_dir = starter.state_dir
    try:
        argv = node.prepare(state_dir, ports)
    except node.NodeBusyError as err:
        raise ClusterError("kubelet", str(err), state_dir) from err
    starter.start("containerd", argv["containerd"])
    starter.wait("containerd", "its socket", lambda: node.containerd_socket(state_dir).is_socket())
    for archive in images.values():
        node.import_image(state_dir, archive)
    starter.start("coredns", argv["coredns"], node.coredns_env(state_dir, ports["coredns_ready"]))
    starter.wait(
        "coredns", "/ready", lambda: http_ok(f"http://127.0.0.1:{ports['coredns_ready']}/ready")
    )
    starter.start("kubelet", argv["kubelet"])
    starter.wait("kubelet", f"node {node.NODE_NAME} Ready", lambda: node.node_ready(kube))
    healthz = f"http://127.0.0.1:{ports['kube_proxy_healthz']}/healthz"
    starter.start("kube-proxy", in_cluster.kube_proxy_argv(state_dir, ports))
    starter.wait("kube-proxy", "its first sync of the Service rules", lambda: http_ok(healthz))


def down(state_dir: Path, quiet: bool = False) -> list[str]:
    """Stop every component of the cluster in ``state_dir``; return the names that were running."""
    state_dir = state_dir.resolve()
    state = _load_state(state_dir) or {}
    stopped = []
    if state.get("real_node"):
        # Its pods go through the kubelet while the apiserver is still there to ask.
        kube = admin_client(state_dir, state["server"]) if state.get("server") else None
        stopped += node.stop(state_dir, kube)
        in_cluster.cleanup_rules()
    stopped += [name for name in reversed(START_ORDER) if process.stop(state_dir, name)]
    if stopped and not quiet:
        say(f"stopped {', '.join(stopped)}")
    return stopped


def status(state_dir: Path) -> dict[str, Any]:
    """Per-component pid and RSS, plus whether the apiserver is ready."""
    state_dir = state_dir.resolve()
    state = _load_state(state_dir) or {}
    components = {}
    for name in _components(state):
        pid = process.running_pid(state_dir, name)
        components[name] = {
            "pid": pid,
            "rss_mib": round(process.rss_kib(pid) / 1024, 1) if pid else 0.0,
        }
    return {
        "state_dir": str(state_dir),
        "kubeconfig": str(state_dir / "kubeconfig"),
        "server": state.get("server"),
        "running": is_running(state_dir),
        "components": components,
        "total_rss_mib": round(sum(c["rss_mib"] for c in components.values()), 1),
        "audit_log": state.get("audit_log"),
        "real_node": node.NODE_NAME if state.get("real_node") else None,
    }
