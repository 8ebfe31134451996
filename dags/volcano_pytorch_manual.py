"""Train the seed's DDP MLP on Volcano, by hand from the Airflow UI's Trigger form.

The template has two W&B Launch template variables, as a queue admin writes them: worker
replicas and every rank's GPUs. Their schemas are the guardrails twice: the form's fields are
made from them, and the render checks each value again, whatever started the run. The form
also offers the image (the deployment's allow-list), the epochs (the run config, read from
``wandb.config``), the W&B project, and elastic workers (docs/elastic.md): ticked, the job
starts once the master and the fewest workers fit, takes up to the worker replicas as GPUs
free up, and replaces a lost worker's pod alone; the worker replicas' bounds hold for it
too. The sensor waits in the triggerer.

The deployment's Airflow configuration, which neither the form nor a Variable can change:

    [volcano_pytorch_manual]
    allowed_namespaces = wandb            # comma-separated names; the first is the default
    allowed_images = ghcr.io/example/*    # comma-separated fnmatch patterns
    default_image = ghcr.io/example/volcano-ddp-mlp:0.1.0   # the form's first value
    max_total_gpus = 64                   # the most GPUs one run may ask for in all
    template = templates/other.yaml       # optional: another template with the same variables,
                                          # relative to this folder or absolute
    follow_master_log = False             # optional: the master's log in the wait task's log
"""

import datetime as dt
import json
from pathlib import Path

import pendulum
from airflow.sdk import DAG, Param

from airflow_volcano_wandb.airflow_compat import conf
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.template import image_param, params_from_template_variables

SECTION = "volcano_pytorch_manual"


def _listed(key: str, default: str) -> list[str]:
    return [i.strip() for i in conf.get(SECTION, key, fallback=default).split(",") if i.strip()]


NAMESPACES = _listed("allowed_namespaces", "wandb")
IMAGES = _listed("allowed_images", "ghcr.io/example/*")
DEFAULT_IMAGE = conf.get(SECTION, "default_image", fallback="ghcr.io/example/volcano-ddp-mlp:0.1.0")
MAX_TOTAL_GPUS = conf.getint(SECTION, "max_total_gpus", fallback=64)
TEMPLATE = Path(conf.get(SECTION, "template", fallback="templates/volcano-pytorch-manual.yaml"))
# Its variables, as wandb.Api().run_queue(...).template_variables returns them.
SCHEMAS = json.loads(
    (Path(__file__).parent / "templates/volcano-pytorch-manual.variables.json").read_text()
)
VARIABLES = {s["name"]: f"{{{{ params.{s['name']} }}}}" for s in SCHEMAS}


def _text(default: str, title: str, **schema) -> Param:
    return Param(default, type="string", minLength=1, title=title, **schema)


with DAG(
    dag_id="volcano_pytorch_manual",
    description="Multi-node PyTorch training on Volcano, linked to its W&B run",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    tags=["volcano", "pytorch", "wandb"],
    # A template outside this folder is found where it is (Jinja looks in the DAG's folder).
    template_searchpath=[str(TEMPLATE.parent)] if TEMPLATE.is_absolute() else None,
    params={
        **params_from_template_variables(SCHEMAS),
        "image_uri": image_param(IMAGES, DEFAULT_IMAGE, description="The ${image_uri} macro."),
        "epochs": Param(3, type="integer", minimum=1, maximum=1000, title="Epochs"),
        "wandb_entity": _text("airflow", "W&B entity"),
        "wandb_project": _text("volcano-ddp", "W&B project"),
        "namespace": _text(NAMESPACES[0], "Kubernetes namespace", enum=NAMESPACES),
        "elastic": Param(
            False,
            type="boolean",
            title="Elastic workers",
            description="Start once the master and the fewest workers fit; grow to the worker "
            "replicas as GPUs free up; a lost worker's pod is replaced alone.",
        ),
        "min_workers": Param(
            1,
            type="integer",
            minimum=0,
            maximum=64,
            title="Fewest workers (elastic)",
            description="The workers the job starts with (at most the worker replicas); "
            "used only when Elastic workers is ticked.",
        ),
    },
) as dag:
    submit = VolcanoPyTorchJobOperator(
        task_id="submit",
        template=TEMPLATE.name if TEMPLATE.is_absolute() else str(TEMPLATE),
        template_variable_schemas=SCHEMAS,
        template_variables=VARIABLES,
        run_config={"epochs": "{{ params.epochs }}"},
        # One whole expression keeps its type: a [min, max] list, or None when not elastic.
        elastic="{{ [params.min_workers, params.worker_replicas] if params.elastic else None }}",
        image_uri="{{ params.image_uri }}",
        namespace="{{ params.namespace }}",
        allowed_namespaces=NAMESPACES,
        allowed_images=IMAGES,  # the form's image receives the W&B API key (docs/security.md)
        max_total_gpus=MAX_TOTAL_GPUS,
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wait_for_completion=False,
        execution_timeout=dt.timedelta(minutes=10),
    )
    wait = VolcanoJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['name'] }}",
        job_uid="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['uid'] }}",
        namespace="{{ params.namespace }}",
        deferrable=True,
        pending_timeout=600,
        follow_master_log=conf.getboolean(SECTION, "follow_master_log", fallback=False),
        timeout=6 * 3600,
        execution_timeout=dt.timedelta(hours=6, minutes=10),
        # The run the submit task started: its progress, summary and link back are read there.
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wandb_summary_keys=["eval/accuracy", "eval/loss"],
    )
    submit >> wait
