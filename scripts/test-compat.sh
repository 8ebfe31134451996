#!/usr/bin/env bash
# The provider on every supported Airflow 3 minor: for each minor, a venv of its own with the
# built WHEELs of the provider and of the local cluster (not editable installs) and that
# minor's patch release from versions.py (AIRFLOW_COMPAT_RELEASES), then the unit tests and the manual example DAG (`airflow dags
# test`, its sensor deferrable, via scripts/demo.py) on the running local cluster.
#
# The venvs are kept in ~/.cache/airflow-volcano-wandb/compat/<minor> and built when absent (or
# resolved otherwise: another Airflow, cutoff or exemption). Airflow's constraint files are not
# reachable from here, so uv resolves every dependency as of the day the minor's release came
# out (`--exclude-newer`, AIRFLOW_COMPAT_CUTOFFS), except the few packages that must be newer
# (AIRFLOW_COMPAT_CUTOFF_EXEMPTIONS, each only up to its own date). The Airflow release is
# installed through an override, so a minor below the package's floor (pyproject) can be tested
# before the floor is lowered. Each run reinstalls the freshly built wheels.
# Every minor runs even when one fails; the exit code is 1 when any failed.
# COMPAT_UNIT_ONLY=1: only the venv and the unit tests, no cluster (reported as such, never as
# passed).
#
# usage: COMPAT_MINORS="3.0 3.3" AVW_CLUSTER_STATE_DIR=.state/cluster scripts/test-compat.sh [PYTHON]
set -euo pipefail

PY=${1:-python3.11}
REPO=$(cd "$(dirname "$0")/.." && pwd)
CACHE=${AVW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-volcano-wandb}/compat
WORK=$(mktemp -d -t avw-test-compat-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
say() { echo "test-compat: $*"; }

UNIT_ONLY=${COMPAT_UNIT_ONLY:-0}
if [[ $UNIT_ONLY != 1 ]]; then
    CLUSTER=${AVW_CLUSTER_STATE_DIR:?AVW_CLUSTER_STATE_DIR must name a running local cluster}
    CLUSTER=$(cd "$REPO" && realpath "$CLUSTER")
fi
# versions.py is pure constants: read it without importing the package (or Airflow). Per minor:
# its release, its cutoff, and the uv options that exempt packages from that cutoff.
declare -A RELEASE CUTOFF EXEMPT
ALL=""
while IFS='|' read -r minor release cutoff exempt; do
    RELEASE[$minor]=$release CUTOFF[$minor]=$cutoff EXEMPT[$minor]=$exempt ALL="$ALL $minor"
done < <(
    "$PY" -c 'import sys; ns = {}; exec(open(sys.argv[1]).read(), ns)
for minor, release in ns["AIRFLOW_COMPAT_RELEASES"].items():
    cutoff = ns["AIRFLOW_COMPAT_CUTOFFS"][minor]
    exempt = " ".join(f"--exclude-newer-package={pkg}={until}"
                      for pkg, until in ns["AIRFLOW_COMPAT_CUTOFF_EXEMPTIONS"].items()
                      if until > cutoff)
    print(minor, release, cutoff, exempt, sep="|")' \
        "$REPO/airflow_volcano_wandb/versions.py"
)
MINORS=${COMPAT_MINORS:-$ALL}
for minor in $MINORS; do
    [[ -n ${RELEASE[$minor]:-} ]] ||
        { say "unknown minor '$minor' (supported:$ALL)"; exit 2; }
done

UV=$("$REPO/scripts/uv-path.sh" "$PY")
say "building the wheels"
"$UV" build -q --wheel --python "$PY" --out-dir "$WORK/dist" "$REPO"
"$UV" build -q --wheel --python "$PY" --out-dir "$WORK/dist" "$REPO/packages/pytest-volcano-cluster"
WHEEL=$(echo "$WORK"/dist/airflow_volcano_wandb-*.whl)
# The `testing` extra's distribution, the local cluster (the DAG run's cluster tools and the
# tests' fixture): not on a registry, so given as its wheel.
HARNESS_WHEEL=$(echo "$WORK"/dist/pytest_volcano_cluster-*.whl)
cp -r "$REPO/dags" "$WORK/dags"  # as a user copies them, with their templates/

unset PYTHONPATH AIRFLOW_HOME AIRFLOW_CONN_KUBERNETES_DEFAULT AIRFLOW_CONN_WANDB_DEFAULT
# A busy 2-core machine can take longer than Airflow's default 30 s to import the DAG files
# (the Kubernetes client alone takes seconds): not what this target tests.
export AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT=${AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT:-300}
# The Airflow release in the venv of $python, from its metadata: importing Airflow takes seconds.
installed() { "$python" -c 'import importlib.metadata as m; print(m.version("apache-airflow"))'; }

declare -A RESULT
for minor in $MINORS; do
    release=${RELEASE[$minor]}
    venv=$CACHE/$minor
    python=$venv/bin/python
    started=$SECONDS
    # How this venv is resolved; a venv resolved otherwise is rebuilt (uv keeps what is
    # installed when it satisfies the requirements, so a new cutoff needs a fresh venv).
    resolution="apache-airflow==$release --exclude-newer=${CUTOFF[$minor]} ${EXEMPT[$minor]}"
    if [[ $(installed 2>/dev/null) != "$release" ||
        $(cat "$venv/avw-resolution" 2>/dev/null) != "$resolution" ]]; then
        say "[$minor] creating $venv ($resolution)"
        "$UV" venv -q --clear -p "$PY" "$venv"
    fi
    echo "apache-airflow==$release" >"$WORK/override-$minor.txt"
    # shellcheck disable=SC2086  # EXEMPT holds zero or more options
    "$UV" pip install -q --python "$python" --reinstall-package airflow-volcano-wandb \
        --reinstall-package pytest-volcano-cluster \
        --exclude-newer "${CUTOFF[$minor]}" ${EXEMPT[$minor]} \
        --override "$WORK/override-$minor.txt" "$WHEEL[dev,testing]" "$HARNESS_WHEEL" \
        "apache-airflow==$release"
    echo "$resolution" >"$venv/avw-resolution"
    say "[$minor] Airflow $(installed), venv ready after $((SECONDS - started)) s"

    status=passed
    say "[$minor] unit tests"
    (cd "$REPO" && "$python" -m pytest tests/unit -q -p no:cacheprovider) || status=FAILED
    if [[ $UNIT_ONLY == 1 ]]; then
        [[ $status == passed ]] && status="unit tests passed, DAG not run"
        RESULT[$minor]="$status ($((SECONDS - started)) s)"
        say "[$minor] ${RESULT[$minor]}"
        continue
    fi
    # A namespace per minor: runs for several minors may share the cluster at once.
    say "[$minor] airflow dags test volcano_pytorch_manual on the cluster in $CLUSTER"
    mkdir -p "$WORK/run-$minor"
    (cd "$WORK/run-$minor" && "$python" "$REPO/scripts/demo.py" --cluster-dir "$CLUSTER" \
        --state-dir "$WORK/state-$minor" --dags-folder "$WORK/dags" \
        --namespace "compat-${minor//./-}") ||
        { tail -50 "$WORK/state-$minor/demo-dags-test.log"; status=FAILED; }
    RESULT[$minor]="$status ($((SECONDS - started)) s)"
    say "[$minor] ${RESULT[$minor]}"
done

failed=0
for minor in $MINORS; do
    say "Airflow ${RELEASE[$minor]}: ${RESULT[$minor]}"
    [[ ${RESULT[$minor]} == passed* || ${RESULT[$minor]} == "unit tests passed"* ]] || failed=1
done
exit $failed
