"""Airflow provider: a multi-node PyTorch job on Kubernetes + Volcano as one task, linked to W&B."""

from __future__ import annotations

from airflow_volcano_wandb.versions import VOLCANO_VERSION

# airflow_volcano_wandb.testing (the local cluster and its pytest plugin) is another
# distribution's, pytest-volcano-cluster (packages/ in the repo). Installed from wheels both
# land in one directory; installed editable each is its own source path, which this joins.
__path__ = __import__("pkgutil").extend_path(__path__, __name__)

__version__ = "0.1.0"

#: The ``[volcano_wandb]`` options, as ``airflow config list`` and the docs show them.
_OPTIONS = {
    "deployment": {
        "description": "A name for this Airflow deployment (e.g. staging, prod). It is part of "
        "every job's identity labels, name and W&B run id, so deployments that share a namespace, "
        "or an Airflow whose metadata DB was reset, never reattach to, delete or count each "
        "other's jobs.",
        "type": "string",
        "example": "prod",
        "default": "",
    },
    "max_concurrent_log_follows": {
        "description": "At most this many master logs followed at once per triggerer, for "
        "deferred tasks with follow_master_log=True; the others wait for a free slot. Read once "
        "per triggerer process.",
        "type": "integer",
        "example": "100",
        "default": "50",
    },
    "volcano_version": {
        "description": "The Volcano release jobs are rendered for (e.g. v1.12.2): a job names "
        "only the job plugins that release has, since Volcano's admission webhook refuses unknown "
        "ones. Volcano hcclrank, which gives torchrun its node rank, needs v1.12.3 or newer; the "
        "oldest release supported is v1.7.0. An operator's volcano_version wins. `python -m "
        "airflow_volcano_wandb doctor` compares it with the cluster's.",
        "type": "string",
        "example": "v1.12.2",
        "default": VOLCANO_VERSION,
    },
    "macros_from_env": {
        "description": "Comma-separated names (not patterns) of ${NAME} macros that a job "
        "template may use, filled from the environment of the process that renders the job (the "
        "Airflow worker), as W&B's Launch agent fills them from its own. Nothing else of the "
        "environment reaches a job, and any other unknown macro stays an error. An operator's "
        "macros_from_env wins.",
        "type": "string",
        "example": "MY_REGISTRY,TEAM_BUCKET",
        "default": "",
    },
    "pod_check_interval": {
        "description": "Seconds between looks at a waiting job's pods (from the shared pod watch, "
        "see pod_watch) for the restart budget (max_container_restarts), a run stopped from W&B "
        "and, while a rank has not started, a container that cannot start (startup_timeout), "
        "whatever else wakes the wait. Lower finds a crash loop or a bad image sooner; with "
        "pod_watch off, higher costs the apiserver less with many waiting jobs (one LIST per job "
        "per interval). Read by the triggerer and by tasks waiting in their own process; at least "
        "1.",
        "type": "float",
        "example": "60",
        "default": "30",
    },
    "progress_interval": {
        "description": "Seconds between reads of a running job's progress (its step, total steps "
        "and epoch, from its online W&B run's summary: docs/trainer.md), whatever else wakes the "
        "wait. The task log gets a progress line at most this often, and at each tenth of the "
        "training. Read by the triggerer and by tasks waiting in their own process; at least 1.",
        "type": "float",
        "example": "30",
        "default": "60",
    },
    "progress_annotation": {
        "description": "Also write each progress line a waiting task logs (once a minute, and at "
        "each tenth of the training) on its Volcano Job, as the annotation "
        "airflow-volcano-wandb.io/progress, for kubectl users: one PATCH per line, so off by "
        "default (docs/performance.md measures it). Read by the triggerer and by tasks waiting in "
        "their own process.",
        "type": "boolean",
        "example": "True",
        "default": "False",
    },
    "pod_watch": {
        "description": "Read waiting jobs' pods from one label-selected watch of the pods of "
        "managed jobs per namespace, shared by every wait in the process (True), instead of one "
        "LIST per job per pod_check_interval (False: for a Role without 'watch' on pods; a Role "
        "without it also falls back to the LISTs, with a warning per failed watch). A verdict "
        "that deletes a job is confirmed by a fresh LIST either way. Read by the triggerer and by "
        "tasks waiting in their own process.",
        "type": "boolean",
        "example": "False",
        "default": "True",
    },
    "defer_settle_seconds": {
        "description": "A deferred task's trigger fires no sooner than this many seconds after "
        "the deferral. Airflow up to 3.3.2 fails a deferred task whose trigger fires before the "
        "scheduler has processed the deferring worker's exit (apache/airflow#67287, #72716), "
        "which a job ending within seconds of the deferral meets. 0 turns the wait off: for an "
        "Airflow without that race, or airflow dags test, which runs the trigger in its own "
        "process. Read by the triggerer.",
        "type": "float",
        "example": "0",
        "default": "15",
    },
}

_INTEGRATIONS = {"Volcano": "https://volcano.sh/", "Weights & Biases": "https://docs.wandb.ai/"}
#: Which modules of each kind serve which integration.
_MODULES = {
    "operators": {"Volcano": "volcano"},
    "sensors": {"Volcano": "volcano"},
    "hooks": {"Volcano": "volcano", "Weights & Biases": "wandb"},
    "triggers": {"Volcano": "volcano"},
}


def get_provider_info() -> dict:
    """Describe this provider to Airflow (its ``apache_airflow_provider`` entry point)."""
    from airflow_volcano_wandb.wandb.connection_form import (
        WANDB_CONN_FIELDS,
        WANDB_UI_FIELD_BEHAVIOUR,
    )

    info: dict = {
        "package-name": "airflow-volcano-wandb",
        "name": "Volcano + Weights & Biases",
        "description": "Submit Volcano PyTorch jobs from W&B Launch queue templates and link them "
        "to their W&B runs.",
        "versions": [__version__],
        "integrations": [
            {"integration-name": name, "external-doc-url": url, "tags": ["software"]}
            for name, url in _INTEGRATIONS.items()
        ],
        "connection-types": [
            {
                "hook-class-name": "airflow_volcano_wandb.hooks.wandb.WandbHook",
                "connection-type": "wandb",
                "hook-name": "Weights & Biases",
                "conn-fields": WANDB_CONN_FIELDS,
                "ui-field-behaviour": WANDB_UI_FIELD_BEHAVIOUR,
            }
        ],
        "extra-links": ["airflow_volcano_wandb.links.wandb.WandbRunLink"],
        "config": {
            "volcano_wandb": {
                "description": "Volcano + Weights & Biases provider.",
                "options": {
                    # Every option so far came in 0.1.0; one added later gives its own.
                    name: {"description": o["description"], "version_added": "0.1.0", **o}
                    for name, o in {**_OPTIONS, "defer_after": _defer_after_option()}.items()
                },
            }
        },
    }
    for kind, modules in _MODULES.items():
        info[kind] = [
            {"integration-name": name, "python-modules": [f"airflow_volcano_wandb.{kind}.{module}"]}
            for name, module in modules.items()
        ]
    return info


def _defer_after_option() -> dict:
    """``defer_after``'s default depends on the installed Airflow (docs/compatibility.md, note
    7), and Airflow reads a provider's declared default before the code's own fallback, so the
    declared one must be ``parts/job_wait.py``'s ``DEFAULT_DEFER_AFTER``
    (tests/repo/test_config_options.py compares them). Airflow calls this while it builds its
    configuration: importing Airflow here would be circular, so the release is read from the
    installed distribution's metadata."""
    from importlib.metadata import version

    from packaging.version import Version

    serialized = Version("3.2") <= Version(Version(version("apache-airflow")).base_version)
    return {
        "description": "Seconds a deferrable task (operator or sensor) first waits for its job "
        "in its worker, the same wait as deferrable=False, before it defers to the triggerer; a "
        "job that ends within them ends its task at once and never meets Airflow's defer-exit "
        "race nor the defer_settle_seconds wait. The worker slot is held at most this long. 0 "
        "defers at once. The default is 15 on Airflow 3.2 and later and 0 on 3.0 and 3.1, whose "
        "Task SDK does not serialize a task's requests to its supervisor. An operator's or "
        "sensor's defer_after wins.",
        "type": "float",
        "example": "15",
        "default": "15" if serialized else "0",
    }
