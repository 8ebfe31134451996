"""The real node (``up --real-node``): a kubelet whose pods run, beside the simulated ones.

Processes in ``DIR/node/``: containerd (Debian's, with runc) with its own root, state and
socket; the kubelet (built like the apiserver) talking to it; CoreDNS as the cluster DNS. Pods
get their network from the CNI ``bridge`` + ``host-local`` plugins (Debian's
``containernetworking-plugins``) on a bridge made for the node, ``BRIDGE`` with ``GATEWAY``,
where CoreDNS listens too, so a rank resolves its master through Volcano's headless service.
The images come from :mod:`.image` and are imported into containerd: nothing is pulled.

Only pods that ask land here: the node carries the label and the ``NoSchedule`` taint
``REAL_NODE_LABEL``, so a pod needs both ``REAL_NODE_SELECTOR`` and ``REAL_NODE_TOLERATION``
(the simulated tests use neither and never schedule onto it). ``down`` removes the node's pods
through the kubelet, stops the processes and deletes the bridge.

This machine's limits shape the configuration: cgroup v1 (``failCgroupV1: false``, the
``cgroupfs`` driver, no systemd), and no ``CAP_SYS_RESOURCE``, so containerd must not lower
``oom_score_adj`` (``restrict_oom_score_adj``) or every sandbox fails to start.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from airflow_volcano_wandb.testing.cluster import build, image, process
from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError
from airflow_volcano_wandb.testing.cluster.placement import (
    NODE_NAME,
    REAL_NODE_LABEL,
    node_dir,
)

BRIDGE = "avw-real0"
SUBNET = "10.89.0.0/24"
SERVICE_CIDR = "10.96.0.0/16"  # the apiserver's --service-cluster-ip-range
GATEWAY = "10.89.0.1"
CLUSTER_DOMAIN = "cluster.local"
CNI_BIN_DIR = "/usr/lib/cni"
# Stop order is the reverse: the kubelet first, so it does not restart what is being stopped.
COMPONENTS = ("containerd", "coredns", "kubelet", "kube-proxy")  # in_cluster.py
# The kubelet's pod cgroups (cgroupfs driver, default cgroup root); one real node per machine.
KUBEPODS_PIDS_CGROUP = Path("/sys/fs/cgroup/pids/kubepods")
# Which cluster's real node owns this machine's bridge and kubelet cgroups.
OWNER_FILE = Path("/run/airflow-volcano-wandb/real-node.owner")


def image_store(state_dir: Path) -> Path:
    """containerd's root: kept across ``up``s (unlike ``node/``), so images are imported once."""
    return state_dir / "containerd-root"


def containerd_socket(state_dir: Path) -> Path:
    return node_dir(state_dir) / "containerd.sock"


def containerd_config(state_dir: Path) -> str:
    root = node_dir(state_dir)
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{image_store(state_dir)}"
state = "{root / "containerd" / "state"}"

[grpc]
  address = "{containerd_socket(state_dir)}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{root / "containerd" / "opt"}"

[{cri}]
  sandbox_image = "docker.io/library/{image.PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  enable_cdi = false

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{root / "cni"}"
"""


def cni_config(state_dir: Path) -> dict[str, Any]:
    return {
        "cniVersion": "0.4.0",
        "name": "avw-real",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": SUBNET, "gateway": GATEWAY}]],
                    # The Service ClusterIPs through the node, where kube-proxy routes them
                    # (in_cluster.py); no default route: nothing outside is reachable.
                    "routes": [{"dst": SERVICE_CIDR, "gw": GATEWAY}],
                    "dataDir": str(node_dir(state_dir) / "ipam"),
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(state_dir: Path, port: int, healthz_port: int) -> dict[str, Any]:
    root = node_dir(state_dir)
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # The node's address is the bridge's (a kubelet refuses a loopback node IP, and then
        # reports none, so the apiserver could not reach it for pod logs).
        "address": GATEWAY,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{containerd_socket(state_dir)}",
        "clusterDNS": [GATEWAY],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(root / "resolv.conf"),
        "podLogsDir": str(root / "pod-logs"),
        # Served only on this machine's bridge (the apiserver reads logs through it).
        "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"},
        "registerWithTaints": [{"key": REAL_NODE_LABEL, "value": "true", "effect": "NoSchedule"}],
        # The shared machine's disk and memory are other people's too: never evict for them.
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
        "serializeImagePulls": False,
    }


def corefile() -> str:
    return f"""\
.:53 {{
    bind {GATEWAY}
    errors
    ready 127.0.0.1:{{$READY_PORT}}
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {{$KUBECONFIG}}
        pods insecure
        ttl 5
    }}
}}
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


class NodeBusyError(RuntimeError):
    """Another cluster's real node runs on this machine (the bridge and subnet are fixed)."""


def claim_machine(state_dir: Path) -> None:
    """Record ``state_dir`` as the machine's one real node, unless another one still runs.

    The bridge, its subnet and the kubelet's cgroups are machine-wide; a leftover of a
    cluster that is gone (its kubelet no longer runs) is taken over.
    """
    owner = OWNER_FILE.read_text().strip() if OWNER_FILE.exists() else ""
    if owner and Path(owner) != state_dir and process.running_pid(Path(owner), "kubelet"):
        raise NodeBusyError(
            f"the real node of the cluster in {owner} is running on this machine; "
            "`down` that cluster first (one real node per machine)"
        )
    OWNER_FILE.parent.mkdir(parents=True, exist_ok=True)
    OWNER_FILE.write_text(f"{state_dir}\n")


def release_machine(state_dir: Path) -> None:
    if OWNER_FILE.exists() and OWNER_FILE.read_text().strip() == str(state_dir):
        OWNER_FILE.unlink()


def make_bridge() -> None:
    """The pods' bridge with the gateway address CoreDNS binds to (CNI then adds veths)."""
    delete_bridge()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/{SUBNET.split('/')[1]}", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def delete_bridge() -> None:
    _ip("link", "del", BRIDGE, check=False)


def _ctr(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctr", "--address", str(containerd_socket(state_dir)), "-n", "k8s.io", *args],
        capture_output=True,
        text=True,
        check=True,
    )


def import_image(state_dir: Path, archive: Path) -> None:
    """Import a docker-archive unless this very archive (its name holds its hash) was."""
    marker = image_store(state_dir) / "avw-imported" / archive.name
    if marker.exists():
        return
    # Unpacked into the overlayfs snapshotter the CRI plugin creates containers from.
    _ctr(state_dir, "images", "import", str(archive))
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()


def argv(state_dir: Path, bins: dict[str, Path], kubelet_port: int) -> dict[str, list[str]]:
    root = node_dir(state_dir)
    return {
        "containerd": ["containerd", f"--config={root / 'containerd.toml'}"],
        "coredns": [str(bins["coredns"]), "-conf", str(root / "Corefile"), "-dns.port", "53"],
        "kubelet": [
            str(bins["kubelet"]),
            f"--config={root / 'kubelet.yaml'}",
            f"--kubeconfig={state_dir / 'kubeconfig'}",
            f"--root-dir={root / 'kubelet'}",
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={GATEWAY}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=1",
        ],
    }


def prepare(state_dir: Path, ports: dict[str, int]) -> dict[str, list[str]]:
    """Write the node's configs, make its bridge; return the argv of each process."""
    bins = build.ensure_node_binaries()
    claim_machine(state_dir)
    root = node_dir(state_dir)
    (root / "cni").mkdir(parents=True, exist_ok=True)
    (root / "containerd.toml").write_text(containerd_config(state_dir))
    (root / "cni" / "10-avw-real.conflist").write_text(json.dumps(cni_config(state_dir)))
    (root / "Corefile").write_text(corefile())
    (root / "resolv.conf").write_text("")  # no host search domains inside pods
    config = kubelet_config(state_dir, ports["kubelet"], ports["kubelet_healthz"])
    (root / "kubelet.yaml").write_text(yaml.safe_dump(config))
    make_bridge()
    return argv(state_dir, bins, ports["kubelet"])


def coredns_env(state_dir: Path, ready_port: int) -> dict[str, str]:
    return {"KUBECONFIG": str(state_dir / "kubeconfig"), "READY_PORT": str(ready_port)}


def node_ready(kube: Kube) -> bool:
    node = kube.get_or_none(f"/api/v1/nodes/{NODE_NAME}")
    conditions = (node or {}).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _node_pods(kube: Kube) -> list[dict[str, Any]]:
    path = f"/api/v1/pods?fieldSelector=spec.nodeName%3D{NODE_NAME}"
    return kube.get(path)["items"]


def drain(kube: Kube, timeout: float = 30.0) -> None:
    """Delete the node's pods and wait for the kubelet to tear their sandboxes down."""
    try:
        for pod in _node_pods(kube):
            meta = pod["metadata"]
            kube.request(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0},
            )
        deadline = time.monotonic() + timeout
        while _node_pods(kube) and time.monotonic() < deadline:
            time.sleep(0.5)
    except (OSError, KubeError):
        pass  # the apiserver is gone: what is left is killed below


def _kill_cgroup_processes() -> None:
    """SIGKILL what still runs in the node's cgroups (containers of a crashed kubelet)."""
    base = KUBEPODS_PIDS_CGROUP
    for procs in base.glob("**/cgroup.procs") if base.exists() else []:
        for line in procs.read_text().split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line), signal.SIGKILL)


def _kill_shims(state_dir: Path) -> None:
    """Our containerd's shims outlive it; they are found by its socket in their argv."""
    marker = str(containerd_socket(state_dir)).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"containerd-shim" in cmdline and marker in cmdline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def unmount_all(state_dir: Path) -> None:
    """Unmount what the kubelet and containerd left under ``state_dir``, deepest first.

    The kubelet bind-mounts its root dir onto itself and mounts pod volumes below it; a
    killed one leaves them, and the state dir could then not be removed.
    """
    prefix = f"{state_dir}/"
    mounts = [
        line.split()[4].replace("\\040", " ")
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]
    for target in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True, check=False)


def stop(state_dir: Path, kube: Kube | None) -> list[str]:
    """Stop the node's processes and remove its pods' leftovers; return what was running.

    The machine-wide parts (bridge, kubepods cgroups) only when this cluster owns them.
    """
    if kube is not None and process.running_pid(state_dir, "kubelet"):
        drain(kube)
    stopped = [name for name in reversed(COMPONENTS) if process.stop(state_dir, name)]
    _kill_shims(state_dir)
    unmount_all(state_dir)
    owner = OWNER_FILE.read_text().strip() if OWNER_FILE.exists() else ""
    if owner in ("", str(state_dir)):
        _kill_cgroup_processes()
        delete_bridge()
        release_machine(state_dir)
    return stopped
