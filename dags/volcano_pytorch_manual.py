"""Train the seed's DDP MLP on Volcano, by hand from the Airflow UI's Trigger form.

The form's fields come from ``params``: worker replicas, image, epochs, GPUs per worker and the
W&B entity and project. The operator submits the job and returns; the sensor waits for it in
the triggerer (deferrable), so no worker slot is held while the job trains, and then reports
as the operator's own wait would: the task and its outcome written into the W&B run, the
run's ``eval/*`` summary in XCom ``wandb_summary``, and a "W&B Run" button on both tasks.

Whoever may trigger the DAG picks the namespace and the image, and that image receives the W&B
API key: both are allow-listed, by the deployment's Airflow configuration rather than by
anything the form or an Airflow Variable (editable in the UI) can change:

    [volcano_pytorch_manual]
    allowed_namespaces = wandb            # comma-separated names; the first is the default
    allowed_images = ghcr.io/example/*    # comma-separated fnmatch patterns
    default_image = ghcr.io/example/volcano-ddp-mlp:latest   # the form's first value
    max_total_gpus = 64                   # the most GPUs one run may ask for in all
    template = templates/other.yaml       # optional: another queue template (path or text)
    follow_master_log = False             # optional: the master's log in the wait task's log

(or ``AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES`` / ``..._ALLOWED_IMAGES``). The form
offers only the allowed namespaces, and only allowed images: a list to pick from when the
allow-list names images exactly, else a text field that Airflow checks against the patterns
before the run is created. The operator refuses any other before submitting all the same.
"""

from __future__ import annotations

import re

import pendulum
from airflow.sdk import DAG, Param

from airflow_volcano_wandb.airflow_compat import conf
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor

CONFIG_SECTION = "volcano_pytorch_manual"


def _configured_list(key: str, default: str) -> list[str]:
    """A comma-separated list from this DAG's section of the Airflow configuration."""
    value = conf.get(CONFIG_SECTION, key, fallback=default)
    return [item.strip() for item in value.split(",") if item.strip()]


ALLOWED_NAMESPACES = _configured_list("allowed_namespaces", "wandb")
ALLOWED_IMAGES = _configured_list("allowed_images", "ghcr.io/example/*")
# Replicas (up to 64) times GPUs per worker (up to 8) could ask for 520 GPUs: the form's
# limits are per field, so the whole gang's GPUs have a cap of their own.
MAX_TOTAL_GPUS = conf.getint(CONFIG_SECTION, "max_total_gpus", fallback=64)
DEFAULT_IMAGE = conf.get(
    CONFIG_SECTION, "default_image", fallback="ghcr.io/example/volcano-ddp-mlp:latest"
)
WILDCARDS = re.compile(r"[*?\[]")


def _as_json_schema_regex(pattern: str) -> str:
    """An fnmatch pattern (``*``, ``?``, ``[...]``) as a regex that Python and the browser read
    alike: only regex syntax characters are escaped (a browser refuses other escapes)."""
    out, i = [], 0
    while i < len(pattern):
        char = pattern[i]
        end = pattern.find("]", i + 2) if char == "[" else -1
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif end > 0:  # a character class, "[!...]" negated as in fnmatch
            body = pattern[i + 1 : end]
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        else:
            out.append("\\" + char if char in "\\^$.|+()[]{}/" else char)
        i += 1
    return "".join(out)


def _image_param() -> Param:
    """The training image field: a pick-list of exact allowed images, else text that must
    match one of the allowed patterns."""
    common = {
        "type": "string",
        "title": "Training image",
        "description": "Image for every container: the ${image_uri} macro of the template.",
    }
    if ALLOWED_IMAGES and not any(WILDCARDS.search(image) for image in ALLOWED_IMAGES):
        return Param(ALLOWED_IMAGES[0], enum=ALLOWED_IMAGES, **common)
    choices = "|".join(_as_json_schema_regex(image) for image in ALLOWED_IMAGES)
    if not re.fullmatch(choices, DEFAULT_IMAGE):
        raise ValueError(
            f"[{CONFIG_SECTION}] default_image {DEFAULT_IMAGE!r} matches none of allowed_images "
            f"{ALLOWED_IMAGES}: set default_image to an allowed image"
        )
    return Param(DEFAULT_IMAGE, minLength=1, pattern=f"^(?:{choices})$", **common)


# The queue template: the DAG's own unless the deployment configures another (a path in the
# DAG folder, or the template as YAML/JSON text); `make demo REAL_PODS=1` sets one that places
# every rank on the local cluster's real node.
TEMPLATE = conf.get(
    CONFIG_SECTION, "template", fallback="templates/volcano-pytorch-queue-template.yaml"
)
# Show the master pod's log (the trainer's loss) in the wait task's log while it trains.
FOLLOW_MASTER_LOG = conf.getboolean(CONFIG_SECTION, "follow_master_log", fallback=False)

with DAG(
    dag_id="volcano_pytorch_manual",
    description="Multi-node PyTorch training on Volcano, linked to its W&B run",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["volcano", "pytorch", "wandb"],
    params={
        "worker_replicas": Param(
            1,
            type="integer",
            minimum=0,
            maximum=64,
            title="Worker replicas",
            description="Pods in the job's worker task; the master task always has one.",
        ),
        "image_uri": _image_param(),
        "epochs": Param(
            3,
            type="integer",
            minimum=1,
            maximum=1000,
            title="Epochs",
            description="Passed to the trainer as TRAIN_EPOCHS.",
        ),
        "gpus_per_worker": Param(
            0,
            type="integer",
            minimum=0,
            maximum=8,
            title="GPUs per worker",
            description=(
                "nvidia.com/gpu limit of each rank's container, the master's too, so every rank "
                f"uses the same backend (0 trains on CPU). At most {MAX_TOTAL_GPUS} GPUs in all "
                "for the job (ranks times GPUs)."
            ),
        ),
        "wandb_entity": Param(
            "airflow",
            type="string",
            minLength=1,
            title="W&B entity",
            description="The W&B team or user the run is logged under.",
        ),
        "wandb_project": Param(
            "volcano-ddp",
            type="string",
            minLength=1,
            title="W&B project",
            description="The W&B project of the run.",
        ),
        "namespace": Param(
            ALLOWED_NAMESPACES[0] if ALLOWED_NAMESPACES else "wandb",
            type="string",
            # Only the allowed ones: the form offers them, and a run asking for another is
            # refused when it is triggered (and by the operator, should one get through).
            enum=ALLOWED_NAMESPACES,
            title="Kubernetes namespace",
            description="Where the Volcano job runs (the deployment's allow-list).",
        ),
    },
) as dag:
    submit = VolcanoPyTorchJobOperator(
        task_id="submit",
        template=TEMPLATE,
        image_uri="{{ params.image_uri }}",
        replicas={"worker": "{{ params.worker_replicas }}"},
        env={"TRAIN_EPOCHS": "{{ params.epochs }}"},
        # The master is a rank like the workers: the same devices, so every rank picks the
        # same backend (a CPU-only rank 0 would pick gloo while GPU workers pick nccl).
        container_resources={
            task: {"limits": {"nvidia.com/gpu": "{{ params.gpus_per_worker }}"}}
            for task in ("master", "worker")
        },
        namespace="{{ params.namespace }}",
        allowed_namespaces=ALLOWED_NAMESPACES,
        # The form's image receives the W&B API key: only images from registry paths you
        # control may run (see docs/security.md).
        allowed_images=ALLOWED_IMAGES,
        max_total_gpus=MAX_TOTAL_GPUS,
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wait_for_completion=False,
    )
    wait = VolcanoJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['name'] }}",
        job_uid="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['uid'] }}",
        namespace="{{ params.namespace }}",
        deferrable=True,
        pending_timeout=600,
        follow_master_log=FOLLOW_MASTER_LOG,
        timeout=6 * 3600,
        # As the operator's own wait would: the run's metrics to XCom, the task into the run.
        wandb_summary_keys=["eval/accuracy", "eval/loss"],
    )
    submit >> wait
