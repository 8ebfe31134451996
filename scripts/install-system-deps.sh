#!/usr/bin/env bash
# System packages the Airflow-run tests need: Debian's Chromium and its chromedriver (the
# browser test drives the distribution's browser; nothing is downloaded by Selenium or
# Playwright), Debian's PostgreSQL (the metadata DB of the test Airflow stacks, started by
# tests/e2e/postgres.py as a plain process in a state dir; the package's own cluster service
# is not used) and Debian's Redis (the Celery broker of those stacks under EXECUTOR=celery,
# started by tests/e2e/redis_server.py the same way; its system service is not used).
# With --real-node, what the cluster's real kubelet node needs instead (docs/local-cluster.md):
# containerd and runc, the CNI plugins, and mmdebstrap, which builds the trainer image.
# Idempotent: does nothing when all are already installed. Needs root (or sudo).
set -euo pipefail

packages=()
if [[ ${1:-} == --real-node ]]; then
    [[ -x /usr/bin/containerd && -x /usr/sbin/runc ]] || packages+=(containerd runc)
    [[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local ]] ||
        packages+=(containernetworking-plugins)
    [[ -x /usr/bin/mmdebstrap ]] || packages+=(mmdebstrap)
else
    [[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] || packages+=(chromium chromium-driver)
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || packages+=(postgresql)
    [[ -x /usr/bin/redis-server ]] || packages+=(redis-server)
fi
if [[ ${#packages[@]} -eq 0 ]]; then
    exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then
        SUDO="sudo"
    else
        echo "install-system-deps: need root to install ${packages[*]}" >&2
        exit 1
    fi
fi

export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# policy-rc.d-less containers: the postgresql and redis-server packages may try to start their
# own services; the tests never use them.
$SUDO apt-get install -y -q --no-install-recommends "${packages[@]}"
