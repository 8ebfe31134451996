"""The versions this provider targets and is tested with: the one place they are written (the
local cluster builds exactly these). Volcano is 1.14.1, not 1.15: 1.15.0 needs
``volcano.sh/apis`` changes newer than any release the Go module proxy serves.
"""

from __future__ import annotations

#: Kubernetes control plane of the local cluster (kube-apiserver, kube-controller-manager).
KUBERNETES_VERSION = "v1.35.3"
#: etcd, the release Kubernetes 1.35 pins.
ETCD_VERSION = "v3.6.5"
#: Volcano (webhook manager, scheduler, controller manager, CRDs); the Helm chart version.
VOLCANO_VERSION = "v1.14.1"
#: KWOK, which simulates the nodes and what happens inside pods.
KWOK_VERSION = "v0.8.0"
#: CoreDNS, the real node's cluster DNS (the cluster's go/coredns module).
COREDNS_VERSION = "v1.15.0"
#: The Airflow release the provider is developed and fully tested with (the project venv).
AIRFLOW_VERSION = "3.3.2"
#: The oldest minor whose ``make test-compat`` passes, and the patch release it tests each on.
AIRFLOW_FLOOR = "3.0"
AIRFLOW_COMPAT_RELEASES = {"3.0": "3.0.6", "3.1": "3.1.8", "3.2": "3.2.2", "3.3": AIRFLOW_VERSION}
#: When each of those releases was complete on PyPI (UTC): ``make test-compat`` resolves a
#: minor's venv with ``uv --exclude-newer`` at this time, standing in for Airflow's constraint
#: files, which are not reachable from here.
AIRFLOW_COMPAT_CUTOFFS = {
    "3.0": "2025-08-29T16:00:00Z",  # 3.0.6 uploaded 2025-08-29 15:56 UTC
    "3.1": "2026-03-11T20:00:00Z",  # 3.1.8 uploaded 2026-03-11 19:28 UTC
    "3.2": "2026-05-29T06:00:00Z",  # 3.2.2 uploaded 2026-05-29 05:20 UTC
    "3.3": "2026-09-17T09:00:00Z",  # 3.3.2 uploaded 2026-09-17 08:40 UTC
}
#: Packages a minor's venv may take newer than its cutoff, up to the time given: a requirement
#: whose floor came out after that Airflow release (cncf.kubernetes 10.8.0, after 3.0.6).
AIRFLOW_COMPAT_CUTOFF_EXEMPTIONS = {
    "apache-airflow-providers-cncf-kubernetes": "2025-09-09T04:00:00Z",
}
