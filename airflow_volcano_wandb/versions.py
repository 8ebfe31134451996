"""The versions this provider targets and is tested with: the one place they are written.

The local cluster (``airflow_volcano_wandb.testing.cluster``, distribution
pytest-volcano-cluster) builds exactly these releases (its ``build.py`` reads them, and a unit
test checks the Go module pins under its ``go/`` agree), ``doctor`` names the
Volcano release in its hints, and docstrings that cite Volcano behaviour refer to this release.

Volcano is 1.14.1, not 1.15: 1.15.0 needs ``volcano.sh/apis`` changes newer than any release
the Go module proxy serves, so it cannot be built from published modules.
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
#: Every Airflow 3 minor the provider supports (pyproject.toml: >=3.0), with the patch release
#: ``make test-compat`` tests it on (its unit tests and the manual DAG on the local cluster).
#: What each older minor lacks is in ``airflow_compat.py`` and docs/compatibility.md.
#: The oldest minor the package allows: the oldest whose ``make test-compat`` passes (CI runs
#: it: ``make test-compat-ci``).
AIRFLOW_FLOOR = "3.0"
AIRFLOW_COMPAT_RELEASES = {"3.0": "3.0.6", "3.1": "3.1.8", "3.2": "3.2.2", "3.3": AIRFLOW_VERSION}
#: When each of those releases was complete on PyPI (UTC): the hour after the last file of
#: ``apache-airflow``, ``apache-airflow-core`` and ``apache-airflow-task-sdk`` of that release was
#: uploaded (read once from PyPI's simple index, ``upload-time``). ``make test-compat`` resolves
#: every dependency of a minor's venv with ``uv --exclude-newer`` at this time, so pydantic,
#: fastapi, SQLAlchemy... are the releases that Airflow release shipped against: Airflow's
#: constraint files, which pin them, are not reachable from here.
AIRFLOW_COMPAT_CUTOFFS = {
    "3.0": "2025-08-29T16:00:00Z",  # 3.0.6 uploaded 2025-08-29 15:56 UTC
    "3.1": "2026-03-11T20:00:00Z",  # 3.1.8 uploaded 2026-03-11 19:28 UTC
    "3.2": "2026-05-29T06:00:00Z",  # 3.2.2 uploaded 2026-05-29 05:20 UTC
    "3.3": "2026-09-17T09:00:00Z",  # 3.3.2 uploaded 2026-09-17 08:40 UTC
}
#: The only packages a minor's venv may take newer than its cutoff, each up to the time given,
#: applied only where that time is after the minor's cutoff: a requirement of this package
#: whose lower bound was released after an Airflow release. cncf.kubernetes: the provider
#: requires >=10.8 and 10.8.0 came out on 2025-09-09, after 3.0.6 (10.7.0 was the newest then);
#: the exemption ends right after 10.8.0, so 3.0 is tested with exactly the declared floor.
AIRFLOW_COMPAT_CUTOFF_EXEMPTIONS = {
    "apache-airflow-providers-cncf-kubernetes": "2025-09-09T04:00:00Z",
}
