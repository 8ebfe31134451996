"""The pod cache's report section (its figures: ``pod_cache_bench.py``, which records through
``results_file`` and so must not be imported by ``report``)."""

from __future__ import annotations


def md_pod_cache(r: dict) -> list[str]:
    p = r["pod_cache"]
    rows = [
        ("as the API sends it", p["as_sent"]),
        ("without `managedFields`", p["without_managed_fields"]),
        ("the pod watch's copy (`kept_pod`)", p["kept"]),
    ]
    return [
        "## The pod watch's memory per pod",
        "",
        f"{p['pods']} running pods shaped like the local cluster's (JSON "
        f"{p['json_kib_per_pod']} KiB each), each parsed from its own JSON, held by Python "
        "(`tracemalloc`, not RSS):",
        "",
        "| kept | MB | KiB per pod |",
        "|---|---|---|",
        *(f"| {name} | {f['mb']} | {f['kib_per_pod']} |" for name, f in rows),
        "",
        f"The pod watch's copy holds {p['kept_over_as_sent']:.2f} of the pod as sent.",
        *(
            [
                "",
                "Each pod's watch event on the event loop (median of five passes): "
                f"{p['event_parse_ms']['as_v1pod']} ms with kubernetes_asyncio's default "
                f"`V1Pod`, {p['event_parse_ms']['as_sent']} ms kept as sent (the provider's "
                "watch).",
            ]
            if "event_parse_ms" in p
            else []
        ),
    ]
