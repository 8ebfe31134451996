"""The versions this provider targets and is tested with: the one place they are written.

The local cluster builds exactly these releases (``testing/cluster/build.py`` reads them, and a
unit test checks the Go module pins under ``testing/cluster/go/`` agree), ``doctor`` names the
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
#: The Airflow release the provider is developed and fully tested with (the project venv).
AIRFLOW_VERSION = "3.3.2"
#: Every Airflow 3 minor the provider supports (pyproject.toml: >=3.0), with the patch release
#: ``make test-compat`` tests it on (its unit tests and the manual DAG on the local cluster).
#: What each older minor lacks is in ``airflow_compat.py`` and the README's compatibility table.
#: The oldest minor the package allows: the oldest whose ``make test-compat`` passes
#: (3.0-3.2 do not yet; see the README's "Airflow compatibility").
AIRFLOW_FLOOR = "3.3"
AIRFLOW_COMPAT_RELEASES = {"3.0": "3.0.6", "3.1": "3.1.8", "3.2": "3.2.2", "3.3": AIRFLOW_VERSION}
