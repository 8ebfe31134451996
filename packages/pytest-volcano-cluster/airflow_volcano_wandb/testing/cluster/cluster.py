"""``up`` / ``down`` / ``status`` for one local cluster living in a state directory.

Layout of ``DIR``: ``kubeconfig``, ``state.json`` (ports, sizes), ``pki/``, ``etcd/``,
``logs/<component>.log``, ``run/<component>.pid``, ``podlogs/`` and the generated configs;
with ``audit_log=True`` also ``logs/audit.log`` (the apiserver's audit log, JSON lines).
Each ``up`` after a ``down`` starts from an empty etcd: the cluster is a test fixture.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster import build, image, manifests, node, process
from airflow_volcano_wandb.testing.cluster.certs import PKI, ensure_pki
from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError
from airflow_volcano_wandb.versions import VOLCANO_VERSION

# Stop order: everything that talks to the apiserver first, etcd last.
START_ORDER = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "vc-webhook-manager",
    "vc-scheduler",
    "vc-controller-manager",
    "kwok",
    "podlogs",
)
DEFAULT_NODES = 4
DEFAULT_GPUS_PER_NODE = 8
#: Set (to anything) to start clusters with the apiserver's audit log (``up --audit-log``).
AUDIT_LOG_ENV = "AVW_CLUSTER_AUDIT_LOG"
#: Set (to anything) to start clusters with the real node (``up --real-node``).
REAL_NODE_ENV = "AVW_CLUSTER_REAL_NODE"
VOLCANO_CONTROLLERS = "job-controller,pg-controller,queue-controller,gc-controller"
# Garbage collection (a deleted job's pods go), service accounts and their tokens (pods need
# the `default` one to be admitted), and namespace deletion (the test fixture's clean-up).
KUBE_CONTROLLERS = ",".join(
    (
        "garbage-collector-controller",
        "serviceaccount-controller",
        "serviceaccount-token-controller",
        "namespace-controller",
        "root-ca-certificate-publisher-controller",
    )
)


class ClusterError(RuntimeError):
    """``up`` failed; ``component`` names the culprit and the message ends with its log tail."""

    def __init__(self, component: str, reason: str, state_dir: Path) -> None:
        log = process.log_file(state_dir, component)
        super().__init__(f"{component}: {reason}\n--- last lines of {log} ---\n{process.tail(log)}")
        self.component = component


# Who did what to which resource, never a request or response body (so never a Secret's
# data): enough to derive the (resource, verb) set an identity used.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


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


def _say(message: str) -> None:
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


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


class _Starter:
    """Starts components and waits on readiness, failing fast when a component dies."""

    def __init__(self, state_dir: Path, deadline: float) -> None:
        self.state_dir = state_dir
        self.deadline = deadline
        self.started: list[str] = []
        self.t0 = time.monotonic()
        self.verbose = bool(os.environ.get("AVW_CLUSTER_VERBOSE"))

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        process.start(self.state_dir, name, argv, env)
        self.started.append(name)

    def check_alive(self) -> None:
        for name in self.started:
            if not process.started_alive(self.state_dir, name):
                raise ClusterError(name, "exited during start-up", self.state_dir)

    def wait(self, component: str, what: str, probe: Callable[[], bool]) -> None:
        last_error: Exception | None = None
        while True:
            self.check_alive()
            try:
                if probe():
                    if self.verbose:
                        _say(f"{component}: {what} ({time.monotonic() - self.t0:.1f}s)")
                    return
            except (OSError, KubeError, ssl.SSLError, KeyError, ValueError) as err:
                last_error = err
            if time.monotonic() > self.deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise ClusterError(
                    component, f"timed out waiting for {what}{detail}", self.state_dir
                )
            time.sleep(0.25)


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def _tls_answers(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
    ):
        return True


def _crd_files() -> list[Path]:
    volcano = build.module_file(
        "volcano.sh/volcano", build.BY_NAME["vc-scheduler"].version, "config/crd/volcano/bases"
    )
    kwok = build.module_file(
        "sigs.k8s.io/kwok",
        build.BY_NAME["kwok"].version,
        "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml",
    )
    return [*sorted(volcano.glob("*.yaml")), kwok]


def _apply_crds(kube: Kube) -> list[str]:
    names = []
    for path in _crd_files():
        for doc in manifests.load_yaml_docs(path):
            kube.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            names.append(doc["metadata"]["name"])
    return names


def _crds_established(kube: Kube, names: list[str]) -> bool:
    for name in names:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conds.get("Established") != "True":
            return False
    return True


def _nodes_ready(kube: Kube, count: int) -> bool:
    nodes = kube.get(f"/api/v1/nodes?labelSelector={manifests.NODE_LABEL}%3Dtrue")["items"]
    ready = [
        n
        for n in nodes
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions", [])
        )
    ]
    return len(ready) >= count


def _queue_open(kube: Kube) -> bool:
    queue = kube.get_or_none("/apis/scheduling.volcano.sh/v1beta1/queues/default")
    return bool(queue) and queue.get("status", {}).get("state") == "Open"


def _webhook_defaults_jobs(kube: Kube) -> bool:
    """A dry-run job create goes through both Volcano webhooks; the mutator sets the queue."""
    probe = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "avw-readiness-probe", "namespace": "default"},
        "spec": {
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "image": "busybox"}],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ]
        },
    }
    created = kube.request(
        "POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs?dryRun=All", probe
    )
    return created.get("spec", {}).get("queue") == "default"


def _default_sa(kube: Kube) -> bool:
    return kube.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is not None


def _audit_args(state_dir: Path) -> list[str]:
    """kube-apiserver flags for an audit log at Metadata level (writes the policy file)."""
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    return [
        f"--audit-policy-file={policy}",
        f"--audit-log-path={state_dir / 'logs' / 'audit.log'}",
        "--audit-log-format=json",
        # Each event is written before its request returns: a test reads a complete log.
        "--audit-log-mode=blocking",
        "--audit-log-maxsize=0",
    ]


def _argv(
    bins: dict[str, Path], state_dir: Path, pki: PKI, ports: dict[str, int]
) -> dict[str, list[str]]:
    kubeconfig = str(state_dir / "kubeconfig")
    etcd_url = f"http://127.0.0.1:{ports['etcd']}"
    peer_url = f"http://127.0.0.1:{ports['etcd_peer']}"
    vc_common = [f"--kubeconfig={kubeconfig}", "--scheduler-name=volcano"]
    return {
        "etcd": [
            str(bins["etcd"]),
            "--name=avw",
            f"--data-dir={state_dir / 'etcd'}",
            f"--listen-client-urls={etcd_url}",
            f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=avw={peer_url}",
            # A throw-away test store: durability buys nothing and fsync costs seconds.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=2147483648",
            "--log-level=warn",
        ],
        "kube-apiserver": [
            str(bins["kube-apiserver"]),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            f"--secure-port={ports['apiserver']}",
            "--advertise-address=127.0.0.1",
            f"--tls-cert-file={pki.cert('apiserver')}",
            f"--tls-private-key-file={pki.key('apiserver')}",
            f"--client-ca-file={pki.ca}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={pki.sa_pub}",
            f"--service-account-signing-key-file={pki.sa_key}",
            "--service-cluster-ip-range=10.96.0.0/16",
            f"--kubelet-client-certificate={pki.cert('apiserver-kubelet-client')}",
            f"--kubelet-client-key={pki.key('apiserver-kubelet-client')}",
            "--kubelet-preferred-address-types=InternalIP,Hostname",
            "--allow-privileged=true",
            # This plugin taints new nodes not-ready until the node-lifecycle controller sees
            # kubelet heartbeats; simulated nodes have none, so they would never be usable.
            "--disable-admission-plugins=TaintNodesByCondition",
            # Endpoints may not point at loopback, so the `kubernetes` service stays empty.
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--enable-priority-and-fairness=false",
            "--event-ttl=30m",
        ],
        "kube-controller-manager": [
            str(bins["kube-controller-manager"]),
            f"--kubeconfig={kubeconfig}",
            f"--controllers={KUBE_CONTROLLERS}",
            f"--service-account-private-key-file={pki.sa_key}",
            f"--root-ca-file={pki.ca}",
            "--leader-elect=false",
            "--secure-port=0",
            "--use-service-account-credentials=false",
        ],
        "vc-webhook-manager": [
            str(bins["vc-webhook-manager"]),
            *vc_common,
            f"--tls-cert-file={pki.cert('webhook')}",
            f"--tls-private-key-file={pki.key('webhook')}",
            f"--ca-cert-file={pki.ca}",
            "--listen-address=127.0.0.1",
            f"--port={ports['webhook']}",
            f"--webhook-url=https://127.0.0.1:{ports['webhook']}",
            f"--enabled-admission={','.join(manifests.ADMISSIONS)}",
            f"--healthz-address=127.0.0.1:{ports['webhook_healthz']}",
            "--graceful-shutdown-time=1s",
        ],
        "vc-scheduler": [
            str(bins["vc-scheduler"]),
            *vc_common,
            f"--scheduler-conf={state_dir / 'volcano-scheduler.conf'}",
            "--leader-elect=false",
            f"--listen-address=127.0.0.1:{ports['scheduler_metrics']}",
            f"--healthz-address=127.0.0.1:{ports['scheduler_healthz']}",
            "--cache-dumper=false",
        ],
        "vc-controller-manager": [
            str(bins["vc-controller-manager"]),
            *vc_common,
            "--leader-elect=false",
            f"--controllers={VOLCANO_CONTROLLERS}",
            f"--listen-address=127.0.0.1:{ports['controller_metrics']}",
            f"--healthz-address=127.0.0.1:{ports['controller_healthz']}",
        ],
        "kwok": [
            str(bins["kwok"]),
            f"--kubeconfig={kubeconfig}",
            f"--config={state_dir / 'kwok.yaml'}",
            f"--manage-nodes-with-label-selector={manifests.NODE_LABEL}=true",
            "--node-ip=127.0.0.1",
            f"--node-port={ports['kwok']}",
            f"--server-address=127.0.0.1:{ports['kwok']}",
            f"--tls-cert-file={pki.cert('kwok')}",
            f"--tls-private-key-file={pki.key('kwok')}",
            "--enable-crds=Logs",
            "--cidr=10.244.0.0/16",
        ],
        "podlogs": [
            sys.executable,
            "-m",
            "airflow_volcano_wandb.testing.cluster",
            "podlogs",
            "--state-dir",
            str(state_dir),
        ],
    }


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
        _say(f"already running: {state_dir / 'kubeconfig'}")
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

    argv = _argv(bins, state_dir, pki, ports)
    if audit_log:
        argv["kube-apiserver"] += _audit_args(state_dir)
    if real_node:
        # Cluster DNS answers from EndpointSlices, which only the first fills; the second
        # binds the claims the real node's pods keep their W&B files on (placement.wandb_dir).
        extra = ",endpointslice-controller,persistentvolume-binder-controller"
        argv["kube-controller-manager"] = [
            a + extra if a.startswith("--controllers=") else a
            for a in argv["kube-controller-manager"]
        ]
    starter = _Starter(state_dir, time.monotonic() + timeout)
    kube = admin_client(state_dir, server)
    try:
        starter.start("etcd", argv["etcd"])
        starter.wait(
            "etcd", "etcd health", lambda: _http_ok(f"http://127.0.0.1:{ports['etcd']}/health")
        )
        starter.start("kube-apiserver", argv["kube-apiserver"])
        starter.wait("kube-apiserver", "/readyz", lambda: kube.text("/readyz") == "ok")

        crds = _apply_crds(kube)
        starter.wait("kube-apiserver", "CRDs established", lambda: _crds_established(kube, crds))
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
            "kube-controller-manager", "the default service account", lambda: _default_sa(kube)
        )
        starter.wait("kwok", f"{nodes} Ready nodes", lambda: _nodes_ready(kube, nodes))
        starter.wait(
            "vc-webhook-manager", "the webhook port", lambda: _tls_answers(ports["webhook"])
        )
        starter.wait(
            "vc-controller-manager", "the default queue to be Open", lambda: _queue_open(kube)
        )
        starter.wait(
            "vc-webhook-manager",
            "a job to be defaulted by the webhook",
            lambda: _webhook_defaults_jobs(kube),
        )
        if real_node:
            _start_real_node(starter, kube, ports, images)
    except BaseException:
        # Nothing may keep running after a failed `up`; the logs stay for the post-mortem.
        down(state_dir, quiet=True)
        raise
    _say(
        f"ready in {time.monotonic() - started_at:.1f}s "
        f"({nodes} nodes x {gpus_per_node} {manifests.GPU_RESOURCE}"
        + (f" + real node {node.NODE_NAME})" if real_node else ")")
    )
    return _info(state_dir, state)


def _node_images() -> dict[str, Path]:
    """The real node's images as docker-archive tars, built (or found cached) before start."""
    pause = build.ensure_node_binaries()["pause"]
    return {"pause": image.pause_image(pause), "trainer": image.trainer_image()}


def _start_real_node(
    starter: _Starter, kube: Kube, ports: dict[str, int], images: dict[str, Path]
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
        "coredns", "/ready", lambda: _http_ok(f"http://127.0.0.1:{ports['coredns_ready']}/ready")
    )
    starter.start("kubelet", argv["kubelet"])
    starter.wait("kubelet", f"node {node.NODE_NAME} Ready", lambda: node.node_ready(kube))


def down(state_dir: Path, quiet: bool = False) -> list[str]:
    """Stop every component of the cluster in ``state_dir``; return the names that were running."""
    state_dir = state_dir.resolve()
    state = _load_state(state_dir) or {}
    stopped = []
    if state.get("real_node"):
        # Its pods go through the kubelet while the apiserver is still there to ask.
        kube = admin_client(state_dir, state["server"]) if state.get("server") else None
        stopped += node.stop(state_dir, kube)
    stopped += [name for name in reversed(START_ORDER) if process.stop(state_dir, name)]
    if stopped and not quiet:
        _say(f"stopped {', '.join(stopped)}")
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
