# The two commands the README opens with: `make demo` and `make test`.
SHELL := /bin/bash
PY ?= python3.11
VENV ?= .venv
STATE ?= $(CURDIR)/.state
CLUSTER_DIR ?= $(STATE)/cluster
AIRFLOW_DIR ?= $(STATE)/airflow
BIN := $(VENV)/bin
# The local cluster's own distribution (pytest-volcano-cluster), the provider's `testing` extra.
HARNESS := packages/pytest-volcano-cluster
export PATH := $(CURDIR)/$(BIN):$(PATH)
# Bytecode, cached outside the repo. The venv is installed without .pyc files (uv's default),
# and these machines set PYTHONDONTWRITEBYTECODE: every Airflow process the suite starts (a
# scheduler, a triggerer, each task, each `airflow dags test`) then compiled Airflow and the
# Kubernetes clients from source, 10 to 40 s each instead of about 3 s.
unexport PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX ?= $(HOME)/.cache/airflow-volcano-wandb/pycache

.PHONY: venv dist demo test test-unit test-long test-real-pods test-token-rotation test-kubernetes-executor test-lifecycle test-ha test-compat test-compat-ci screenshots lint check-wheel cluster-up cluster-down cluster-status airflow-up airflow-down airflow-status bench clean

# Never pip-installs into the system Python (PEP 668): see scripts/bootstrap-venv.sh.
$(BIN)/activate: pyproject.toml $(HARNESS)/pyproject.toml scripts/bootstrap-venv.sh scripts/uv-path.sh
	scripts/bootstrap-venv.sh $(PY) $(VENV) dev,testing,train
	@touch $@

venv: $(BIN)/activate

# REAL_PODS=1: the cluster gets the real node (docs/local-cluster.md) and the demo trains there.
REAL_PODS ?=
cluster-up: venv
	$(if $(REAL_PODS),scripts/install-system-deps.sh --real-node)
	$(BIN)/python -m airflow_volcano_wandb.testing.cluster up --state-dir $(CLUSTER_DIR) $(if $(REAL_PODS),--real-node)

cluster-down:
	$(BIN)/python -m airflow_volcano_wandb.testing.cluster down --state-dir $(CLUSTER_DIR)

cluster-status:
	$(BIN)/python -m airflow_volcano_wandb.testing.cluster status --state-dir $(CLUSTER_DIR)

# The tests' production-shaped Airflow beside the local cluster, to try the example DAGs in its
# UI: PostgreSQL, the API server, two schedulers, the DAG processor and two triggerers, detached,
# in $(AIRFLOW_DIR) (tests/e2e/airflow_up.py). PostgreSQL is Debian's (install-system-deps.sh).
# CeleryExecutor (Debian's Redis as its broker, two Celery workers); EXECUTOR=local: LocalExecutor.
airflow-up: cluster-up
	scripts/install-system-deps.sh
	$(BIN)/python -m tests.e2e.airflow_up up --state-dir $(AIRFLOW_DIR) --cluster-dir $(CLUSTER_DIR)

airflow-down:
	$(BIN)/python -m tests.e2e.airflow_up down --state-dir $(AIRFLOW_DIR)

airflow-status:
	$(BIN)/python -m tests.e2e.airflow_up status --state-dir $(AIRFLOW_DIR)

demo: cluster-up
	$(BIN)/python scripts/demo.py --cluster-dir $(CLUSTER_DIR) --state-dir $(STATE) $(if $(REAL_PODS),--real-pods)

# The whole suite: unit tests, the local-cluster integration tests (the fixture starts the
# cluster, building it on first use) and the end-to-end Airflow + browser test (Debian's
# chromium and postgresql, installed by scripts/install-system-deps.sh when missing).
# The cluster the suite starts writes the apiserver's audit log: the security audit and the
# watch-load trial read who asked for what from it.
test: venv
	scripts/install-system-deps.sh
	$(BIN)/ruff check .
	AVW_CLUSTER_AUDIT_LOG=1 $(BIN)/python -m pytest --durations=30

# Tests too long for `make test` and CI (marked `long`; the whole run's time is not measured;
# CONTRIBUTING.md names each file): the e2e_real_airflow driver at its small size, a mapped sweep
# killed and cleared per map index on a real scheduler and triggerer; the lifecycle trials
# through a real Airflow (clears while deferred, two deployments side by side); the watches
# and request rate of two triggerers with 2 then 8 waiting jobs; the HA faults and a
# triggerer restarted under a deferred wait; the apiserver restarted, and down at submit (a
# private cluster); a RoleBinding removed for 30 s.
# `make test-ha` and `make test-lifecycle` run some of them at full size.
test-long: venv
	$(BIN)/python -m pytest -m long

# Trials on real pods (marked `real_pods`): a cluster with the real node (root, containerd;
# docs/local-cluster.md) runs the trainer image built here. Not in `make test` or CI.
test-real-pods: venv
	AVW_CLUSTER_REAL_NODE=1 $(BIN)/python -m pytest -m real_pods tests/realpods

# The in-cluster token trial (marked `long` and `real_pods`; about 30 minutes): the provider's
# trigger in a pod of the Airflow image as the chart's triggerer, its projected token expiring
# every 10 minutes (tests/realpods/test_in_cluster_token.py). Reads the apiserver's audit log.
test-token-rotation: venv
	AVW_CLUSTER_REAL_NODE=1 AVW_CLUSTER_AUDIT_LOG=1 $(BIN)/python -m pytest -m "long and real_pods" \
		tests/realpods/test_in_cluster_token.py

# The KubernetesExecutor trial (marked `long` and `real_pods`): the manual DAG's tasks in pods of
# the Airflow image as the chart's airflow-worker, its triggerer in a pod as airflow-triggerer,
# training DDP on the real node (tests/realpods/test_kubernetes_executor.py). Reads the
# apiserver's audit log; needs PostgreSQL.
test-kubernetes-executor: venv
	scripts/install-system-deps.sh
	AVW_CLUSTER_REAL_NODE=1 AVW_CLUSTER_AUDIT_LOG=1 $(BIN)/python -m pytest -m "long and real_pods" \
		tests/realpods/test_kubernetes_executor.py

# The HA trials at full size (not in CI: about 10 minutes): 20 deferred jobs handed from a
# frozen triggerer to the other one, and the faults (tests/reliability/test_ha_airflow.py);
# the watches and request rate of two triggerers with 2 and then 20 waiting jobs
# (tests/reliability/test_ha_watch_load.py: counted in the apiserver's audit log, so a cluster
# this target starts writes one). `make test` runs the handover with 4 jobs; `make test-long` the
# second with 2 then 8.
test-ha: venv
	scripts/install-system-deps.sh
	AVW_HANDOVER_JOBS=20 AVW_WATCH_LOAD_JOBS=2,20 AVW_CLUSTER_AUDIT_LOG=1 $(BIN)/python -m pytest \
		tests/reliability/test_ha_airflow.py tests/reliability/test_ha_watch_load.py

# The README's pictures of the Airflow UI, from the end-to-end test's real browser (Chromium):
# the trigger form, the W&B link of the task instance and the wait task's log (its progress lines
# and the master's lines) and the Training tab (its own run, under the FAB auth manager), each
# stamped with the DAG it shows (tests/e2e/screenshots.py).
SCREENSHOTS := 01-trigger-form 04-task-instance-wandb-link 05-wait-task-log-master-lines 06-wait-task-log-progress
screenshots: venv
	scripts/install-system-deps.sh
	$(BIN)/python -m pytest tests/e2e/test_airflow_ui_e2e.py
	$(foreach shot,$(SCREENSHOTS),cp test-artifacts/e2e/$(shot).png docs/images/$(shot).png;)
	$(BIN)/python -m pytest tests/e2e/test_training_tab_e2e.py
	cp test-artifacts/training-tab/07-training-tab.png docs/images/07-training-tab.png

test-unit: venv
	$(BIN)/python -m pytest tests/unit tests/repo tests/testing

# Ownership and lifecycle at full size (not in CI: about 20 minutes): 20 clears of a deferred
# task through a real Airflow, and every fault at every step of submission (3 faults times the
# steps a dry run counts: 48 trials when last counted; the test prints its own count).
# `make test` runs the submission faults at a small size, `make test-long` the clears.
test-lifecycle: venv
	AVW_LIFECYCLE_REPEATS=20 AVW_SUBMISSION_FAULT_TRIALS=all $(BIN)/python -m pytest \
		tests/reliability/test_lifecycle_airflow.py tests/reliability/test_submission_faults.py

# The same commands as .pre-commit-config.yaml's hooks; mypy's options are pyproject.toml's.
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The sdists and wheels users install (not on PyPI yet), in dist/: the provider, and the local
# cluster with its pytest fixture ($(HARNESS)).
dist:
	"$$(scripts/uv-path.sh $(PY))" build --python $(PY) --out-dir dist .
	"$$(scripts/uv-path.sh $(PY))" build --python $(PY) --out-dir dist $(HARNESS)

# Build the sdist and wheel and check the installed WHEEL (not this checkout) in a fresh venv;
# with AVW_CLUSTER_STATE_DIR naming a running cluster, also run the manual DAG on it.
check-wheel:
	scripts/check-wheel.sh $(PY)

# Every supported Airflow 3 minor (COMPAT_MINORS, default all: 3.0 3.1 3.2 3.3): a cached venv
# each with the built wheel, the unit tests and the manual DAG on the local cluster (the one
# AVW_CLUSTER_STATE_DIR names, else $(CLUSTER_DIR), started if needed). See scripts/test-compat.sh.
COMPAT_MINORS ?=
test-compat:
	@if [ -z "$$AVW_CLUSTER_STATE_DIR" ]; then $(MAKE) --no-print-directory cluster-up; fi
	AVW_CLUSTER_STATE_DIR="$${AVW_CLUSTER_STATE_DIR:-$(CLUSTER_DIR)}" COMPAT_MINORS="$(COMPAT_MINORS)" \
		scripts/test-compat.sh $(PY)

# CI's share of test-compat: the oldest minor (3.3, the newest, is `make test`'s project venv).
test-compat-ci:
	$(MAKE) --no-print-directory test-compat COMPAT_MINORS=3.0

bench: cluster-up
	$(BIN)/python bench/run_all.py --cluster-dir $(CLUSTER_DIR)

clean: airflow-down cluster-down
	rm -rf $(VENV) $(STATE)
