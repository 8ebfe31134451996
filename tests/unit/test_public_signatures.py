"""The public flat signatures, as literal data: the operator's, the sensor's and
``render_job``'s keyword parameters (names and defaults; their order is no promise) and the
shells' templating attributes. However the classes are built inside, DAGs see these."""

from __future__ import annotations

import inspect
from typing import Any

from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.parts.jinja_fields import TYPED_FIELDS
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.template import render_job

REQUIRED = "<required>"

OPERATOR = {
    # W&B Launch parity (#34): the queue's template variables and the run config.
    "template_variables": None,
    "template_variable_schemas": None,
    "run_config": None,
    # Launch fidelity II (#41): ${NAME} macros from the worker's environment, by name.
    "macros_from_env": None,
    "add_master_policy": True,
    "allowed_images": None,
    "allowed_namespaces": None,
    "allowed_priority_classes": None,
    "allowed_queues": None,
    "allowed_schedulers": ("volcano",),
    "allowed_secrets": None,
    "allowed_service_accounts": None,
    "args": None,
    "checkpoint_artifact": False,
    "checkpoint_grace": None,
    "checkpoint_volume": None,
    "cluster_context": None,
    "command": None,
    "config_file": None,
    "container_resources": None,
    "deferrable": False,
    "defer_after": 0.0,  # tests/conftest.py's [volcano_wandb] defer_after (shipped: 15 s, 3.2+)
    "env": None,
    "finished_job_ttl": 604800,
    "fit_check": "fail",
    "follow_master_log": False,
    "gang": "all_ranks",
    "elastic": None,
    "image_uri": None,
    "in_cluster": None,
    "job_name": None,
    "kubernetes_conn_id": "kubernetes_default",
    "log_lines": 50,
    "macros": None,
    "master_log_max_bytes": 1048576,
    "master_log_max_lines": 10000,
    "max_container_restarts": 3,
    "max_replicas": 1024,
    "max_total_gpus": None,
    "namespace": None,
    "on_finish_action": "delete_succeeded",
    "pending_timeout": None,
    "pod_annotations": None,
    "pod_security": "baseline",
    "poll_interval": 10.0,
    "reattach_on_restart": True,
    "replicas": None,
    "resume_on": ("preempted", "killed"),
    "service_account": None,
    "shm_size": "1Gi",
    "stall_timeout": None,
    "startup_timeout": 120.0,
    "wandb_stop_grace": 60.0,
    "template": REQUIRED,
    "volcano_queue": None,
    "volcano_version": None,
    "wait_for_completion": True,
    "wandb_api_key_secret": None,
    "wandb_conn_id": "wandb_default",
    "wandb_entity": None,
    "wandb_group": None,
    "wandb_mode": None,
    "wandb_project": None,
    "wandb_rank_mode": "master",
    "wandb_run_id": None,
    "wandb_run_name": None,
    "wandb_summary_keys": None,
    "wandb_sweep_id": None,
    "wandb_tags": None,
    "watch_failure_grace": 600.0,
}
OPERATOR_TEMPLATE_FIELDS = {
    "rendered_job",  # set by execute: the Job a try submits, for the Rendered Template view
    "template_variables",
    "run_config",
    "template",
    "image_uri",
    "replicas",
    "macros",
    "namespace",
    "env",
    "container_resources",
    "command",
    "args",
    "job_name",
    "volcano_queue",
    "service_account",
    "pod_annotations",
    "max_total_gpus",
    "checkpoint_volume",
    "wandb_entity",
    "wandb_project",
    "wandb_mode",
    "resume_on",
    "wandb_run_id",
    "wandb_run_name",
    "wandb_group",
    "wandb_sweep_id",
    "wandb_rank_mode",
    "wandb_tags",
    "wandb_api_key_secret",
    "pending_timeout",
    "on_finish_action",
    "elastic",
}
#: The fields where a whole ``{{ expression }}`` keeps its type (#41), for wandb.config.
OPERATOR_TYPED_FIELDS = {
    "run_config",
    "template_variables",
    "replicas",
    "macros",
    "container_resources",
    "elastic",
}
OPERATOR_TEMPLATE_EXT = (".yaml", ".yml", ".json")
OPERATOR_RENDERERS = {
    "template": "yaml",
    "macros": "json",
    "replicas": "json",
    "elastic": "json",
    "template_variables": "json",
    "run_config": "json",
    "rendered_job": "yaml",
}

SENSOR = {
    "cluster_context": None,
    "config_file": None,
    "deferrable": False,
    "defer_after": 0.0,
    "delete_on_kill": True,
    "follow_master_log": False,
    "in_cluster": None,
    "job_name": REQUIRED,
    "job_uid": None,
    "kubernetes_conn_id": "kubernetes_default",
    "log_lines": 50,
    "master_log_max_bytes": 1048576,
    "master_log_max_lines": 10000,
    "max_container_restarts": 3,
    "namespace": None,
    "on_finish_action": "delete_succeeded",
    "pending_timeout": None,
    "stall_timeout": None,
    "startup_timeout": 120.0,
    "wandb_stop_grace": 60.0,
    "wandb_conn_id": "wandb_default",
    "wandb_entity": None,
    "wandb_mode": None,
    "wandb_project": None,
    "wandb_run_id": None,
    "wandb_summary_keys": None,
    "watch_failure_grace": 600.0,
}
SENSOR_TEMPLATE_FIELDS = {
    "job_name",
    "namespace",
    "job_uid",
    "wandb_run_id",
    "wandb_entity",
    "wandb_project",
    "wandb_mode",
    # The operator's since #44: one declaration (JobWait) for both shells ended the drift.
    "pending_timeout",
    "on_finish_action",
}

RENDER_JOB = {
    "template_variables": None,
    "template_variable_schemas": None,
    "run_config": None,
    "template": REQUIRED,
    "macros": REQUIRED,
    "macros_from_env": None,
    "replicas": None,
    "image": None,
    "env": None,
    "resources": None,
    "command": None,
    "args": None,
    "labels": None,
    "annotations": None,
    "pod_labels": None,
    "pod_annotations": None,
    "namespace": None,
    "name": None,
    "queue": None,
    "add_master_policy": True,
    "max_replicas": 1024,
    "run_env": None,
    "gang": "all_ranks",
    "elastic": None,
    "pod_security": "baseline",
    "allowed_images": None,
    "allowed_namespaces": None,
    "template_namespace_allowed": False,
    "service_account": None,
    "allowed_service_accounts": None,
    "torchrun_env": True,
    "shm_size": "1Gi",
    "allowed_secrets": None,
    "allowed_schedulers": ("volcano",),
    "allowed_queues": None,
    "allowed_priority_classes": None,
    "max_total_gpus": None,
    "volcano_version": None,  # the release the provider is tested with (issue 52: one default)
    "checkpoint_volume": None,
    "checkpoint_artifact": False,
    "checkpoint_grace": None,
}


def _defaults(parameters: Any) -> dict[str, Any]:
    return {
        name: REQUIRED if p.default is inspect.Parameter.empty else p.default
        for name, p in parameters
        if name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD
    }


def _flat(cls: type, base: type) -> dict[str, Any]:
    """Every keyword a DAG may give ``cls`` beyond ``base``'s, with its default, whichever of
    its classes declares it."""
    flat: dict[str, Any] = {}
    for klass in cls.mro()[: cls.mro().index(base)]:
        if (init := klass.__dict__.get("__init__")) is not None:
            for name, default in _defaults(inspect.signature(init).parameters.items()).items():
                flat.setdefault(name, default)
    return flat


def test_the_operators_flat_parameters_are_unchanged():
    assert _flat(VolcanoPyTorchJobOperator, BaseOperator) == OPERATOR
    assert set(VolcanoPyTorchJobOperator.template_fields) == OPERATOR_TEMPLATE_FIELDS
    assert VolcanoPyTorchJobOperator.template_ext == OPERATOR_TEMPLATE_EXT
    assert VolcanoPyTorchJobOperator.template_fields_renderers == OPERATOR_RENDERERS
    assert TYPED_FIELDS == OPERATOR_TYPED_FIELDS


def test_the_sensors_flat_parameters_are_unchanged():
    assert _flat(VolcanoJobSensor, BaseSensorOperator) == SENSOR
    assert set(VolcanoJobSensor.template_fields) == SENSOR_TEMPLATE_FIELDS
    assert VolcanoJobSensor.template_ext == BaseSensorOperator.template_ext
    assert VolcanoJobSensor.template_fields_renderers == {}


def test_render_jobs_keywords_are_unchanged():
    assert _defaults(inspect.signature(render_job).parameters.items()) == RENDER_JOB
