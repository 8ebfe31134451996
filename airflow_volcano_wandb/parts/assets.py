"""Put the training step's record on the asset events Airflow emits for the task's outlets.

Airflow emits one event per outlet asset when the task succeeds; its ``extra`` is whatever the
task put on ``context["outlet_events"][asset].extra`` before returning. The content is
``job_facts.asset_extra``; this module only knows where Airflow wants it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow.sdk import Asset, Context


def annotate_outlet_events(
    context: Context, outlets: Iterable[Any], extra: Mapping[str, Any]
) -> list[str]:
    """Add ``extra`` to the event of every concrete asset among ``outlets``.

    Asset aliases are left alone: an alias event needs the asset it resolves to, which only
    the DAG author knows.

    :param context: the task's context.
    :param outlets: the operator's ``outlets``.
    :param extra: JSON-safe values to merge into each event's ``extra``.
    :return: the names of the assets that got it.
    """
    events = context["outlet_events"]
    named = []
    for outlet in outlets:
        if isinstance(outlet, Asset):
            events[outlet].extra.update(extra)
            named.append(outlet.name)
    return named
