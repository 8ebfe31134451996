"""The real node's pods reach the apiserver as pods in a cluster do: through the ``kubernetes``
Service, with their ServiceAccount's projected token (``in_cluster: true``).

Three changes to the control plane, made only when the real node is on:

- the apiserver listens on every address (``0.0.0.0``), not only loopback, so the bridge's
  gateway (``node.GATEWAY``) reaches it, and advertises that address: with the ``lease``
  endpoint reconciler it writes the ``kubernetes`` Service's endpoints itself
  (``10.89.0.1:<port>``), as a real apiserver does;
- ``kube-proxy`` (built from ``k8s.io/kubernetes/cmd/kube-proxy`` at the cluster's version, in a
  Go module of its own, ``go/proxy``, as the kubelet is in ``go/node``) runs in ``iptables``
  mode and routes the Service's ClusterIP (``10.96.0.1:443``, which the kubelet hands every pod
  as ``KUBERNETES_SERVICE_HOST``/``_PORT`` and which the apiserver's certificate names) to
  those endpoints: the client's TLS check and the address a pod dials are the cluster's;
- projected ServiceAccount tokens are not extended
  (``--service-account-extend-token-expiration=false``): a pod's token expires when its
  ``expirationSeconds`` say, and the kubelet rotates it at 80% of its life, so a test can make a
  pod whose token changes every 8 minutes (``expirationSeconds: 600``, the least allowed).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import build, node

KUBE_PROXY = build.Component(
    "kube-proxy", "k8s.io/kubernetes/cmd/kube-proxy", "proxy", build.KUBERNETES_VERSION
)


def apiserver_argv(argv: list[str]) -> list[str]:
    """The kube-apiserver's argv with the flags that let pods use the ``kubernetes`` Service."""
    replaced = {
        "--bind-address": "0.0.0.0",
        "--advertise-address": node.GATEWAY,
        "--endpoint-reconciler-type": "lease",
    }
    out = []
    for arg in argv:
        name = arg.split("=", 1)[0]
        out.append(f"{name}={replaced[name]}" if name in replaced else arg)
    return [*out, "--service-account-extend-token-expiration=false"]


def kube_proxy_argv(state_dir: Path, ports: dict[str, int]) -> list[str]:
    return [
        str(build.build_component(KUBE_PROXY)),
        f"--kubeconfig={state_dir / 'kubeconfig'}",
        f"--hostname-override={node.NODE_NAME}",
        "--proxy-mode=iptables",
        f"--cluster-cidr={node.SUBNET}",
        # No sysctl writes this machine does not allow (nf_conntrack_max, route_localnet).
        "--conntrack-max-per-core=0",
        "--iptables-localhost-nodeports=false",
        f"--healthz-bind-address=127.0.0.1:{ports['kube_proxy_healthz']}",
        f"--metrics-bind-address=127.0.0.1:{ports['kube_proxy_metrics']}",
        "--v=1",
    ]


def cleanup_rules() -> None:
    """Remove kube-proxy's iptables chains once it is stopped (``kube-proxy --cleanup``)."""
    binary = build.binary_path(KUBE_PROXY)
    if binary.exists():
        subprocess.run([str(binary), "--cleanup"], capture_output=True, check=False)
