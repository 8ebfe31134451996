"""The local cluster's components: their order, and the command line each is started with."""

from __future__ import annotations

import sys
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import manifests
from airflow_volcano_wandb.testing.cluster.certs import PKI

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


# Who did what to which resource, never a request or response body (so never a Secret's
# data): enough to derive the (resource, verb) set an identity used.
AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"""


def audit_args(state_dir: Path) -> list[str]:
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


def component_argv(
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
