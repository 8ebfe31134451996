"""The rendered Volcano Job as people read it: YAML in ``render_job``'s order of fields.

What ``dry_run()`` prints and the task log shows before the job is submitted, so a reviewer
sees exactly what the cluster will be asked to run. The job never holds the W&B API key (only
a ``secretKeyRef`` to the run's Secret), so nothing is hidden here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml


def job_as_yaml(job: Mapping[str, Any]) -> str:
    """``job`` as one block YAML document (``---`` to ``...``): the markers set it apart from
    log lines printed around it. Its head in kubectl's order (``apiVersion``, ``kind``,
    ``metadata``, ``spec``), so a view that shows only the start (Airflow truncates a rendered
    field) shows what the job is; the rest in the order the job has them."""
    head = {key: job[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in job}
    return yaml.safe_dump(
        {**head, **job},
        sort_keys=False,
        default_flow_style=False,
        explicit_start=True,
        explicit_end=True,
    )
