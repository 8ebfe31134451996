"""The Training page with 100 running jobs (issue 55): the jobs of the provider, labelled and
annotated with their progress as waiting tasks leave them, in one namespace of the local
cluster; the page's server side (one LIST of the namespace's managed jobs through the provider's
hook, then ``training_view.list_row`` per job, as JSON) in a child process with the bench's
Airflow environment, and Debian's headless Chromium drawing the page (``ui/static/jobs.html``
and its script, served with that JSON) until its table holds every row. Medians of ``runs``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import REPO, child, say, tiny_job

from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.wait.training_progress import PROGRESS_ANNOTATION

KEYS = ("training_page",)
NEEDS = "cluster"
OPTIONS = {
    "training_page_jobs": (100, 10, "running jobs on the Training page"),
    "training_page_runs": (7, 2, "timed page loads"),
}
STATIC = REPO / "airflow_volcano_wandb" / "ui" / "static"
GOAL_S = 2.0


def pods(o) -> int:
    return o.training_page_jobs


def job_body(index: int) -> dict:
    identity = TaskInstanceIdentity(f"dag_{index % 5}", "train", "bench", map_index=index)
    body = tiny_job(f"page-{index:03d}", 600, labels=identity.labels())
    line = f"progress: step {index * 10}/1000 ({index} %), 2.5 steps/s, ETA {100 - index} min"
    body["metadata"]["annotations"] = {PROGRESS_ANNOTATION: line}
    return body


def run(ctx) -> dict:
    cluster, jobs = ctx.cluster, ctx.training_page_jobs
    namespace = cluster.create_namespace("bench-page")
    cluster.create_jobs(namespace, [job_body(i) for i in range(jobs)])
    say(f"training_page: {jobs} jobs in {namespace}")
    out = ctx.work / "training_page.json"
    figures = child(
        "scenario_training_page.py", namespace, jobs, ctx.training_page_runs, out=out, env=ctx.env
    )
    cluster.delete_namespace(namespace)
    return {"training_page": figures}


def server_side(namespace: str, jobs: int) -> tuple[float, dict]:
    """One refresh's server work: the LIST and the rows, as the app builds them."""
    from airflow_volcano_wandb.ui.training_reads import managed_jobs
    from airflow_volcano_wandb.ui.training_view import Kept, list_row

    started = time.perf_counter()
    listed = managed_jobs("kubernetes_default", namespace)
    rows = []
    for index in range(jobs):
        name = f"page-{index:03d}"
        kept = Kept.of_xcoms({"volcano_job": {"name": name, "namespace": namespace}}, "deferred")
        rows.append(list_row(f"dag_{index % 5}", "train", "bench", index, kept, listed.get(name)))
    model = {"jobs": rows, "dag_ids": sorted({r["dag_id"] for r in rows})}
    body = json.dumps(model)
    took = time.perf_counter() - started
    assert len(listed) == jobs and all(r["phase"] or r["percent"] for r in rows), "jobs missing"
    return took, json.loads(body)


def page_server(model: dict) -> ThreadingHTTPServer:
    """The page, its script and its rows, as the API server serves them (auth aside)."""
    files = {
        "/": ("text/html", (STATIC / "jobs.html").read_bytes()),
        "/static/training.js": ("text/javascript", (STATIC / "training.js").read_bytes()),
        "/static/training.css": ("text/css", (STATIC / "training.css").read_bytes()),
        "/api/jobs": ("application/json", json.dumps(model).encode()),
    }

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            kind, data = files.get(self.path.split("?")[0], ("text/plain", b""))
            self.send_response(200 if data else 404)
            self.send_header("Content-Type", kind)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def browser_render_ms(url: str, jobs: int, runs: int) -> list[float]:
    """From navigation start to the table holding every row, in Chromium (ms), per run."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    rows = "return document.querySelectorAll('#jobs tbody tr').length"
    drawn = "return Number(document.body.dataset.refreshed) - performance.timeOrigin"
    took = []
    try:
        for _ in range(runs + 1):  # the first one warms the browser's caches: not counted
            driver.get(url)
            deadline = time.monotonic() + 30
            while driver.execute_script(rows) < jobs and time.monotonic() < deadline:
                time.sleep(0.01)
            assert driver.execute_script(rows) == jobs, "the page did not draw every row"
            took.append(driver.execute_script(drawn))
    finally:
        driver.quit()
    return took[1:]


def measure(namespace: str, jobs: int, runs: int) -> dict:
    server_s, model = [], {}
    for _ in range(runs):
        took, model = server_side(namespace, jobs)
        server_s.append(took)
    server = page_server(model)
    try:
        render = browser_render_ms(f"http://127.0.0.1:{server.server_port}/", jobs, runs)
    finally:
        server.shutdown()
    server_ms, render_ms = statistics.median(server_s) * 1000, statistics.median(render)
    return {
        "jobs": jobs,
        "runs": runs,
        "server_ms": round(server_ms, 1),
        "browser_ms": round(render_ms, 1),
        "total_s": round((server_ms + render_ms) / 1000, 3),
    }


def section(r: dict) -> list[str]:
    p = r["training_page"]
    return [
        f"The Training page with {p['jobs']} running jobs, medians of {p['runs']}: the server's "
        f"refresh (one LIST of the managed jobs, the rows, JSON) {p['server_ms']} ms; Chromium "
        f"drawing the page until every row is there {p['browser_ms']} ms; "
        f"together {p['total_s']} s.",
    ]


def goals(p: dict) -> list[str]:
    ok = "met" if p["total_s"] <= GOAL_S and p["jobs"] >= 100 else "MISSED"
    return [
        f"Training page, {p['jobs']} running jobs, within {GOAL_S:g} s: {ok} ({p['total_s']} s)"
    ]


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("namespace")
    parser.add_argument("jobs", type=int)
    parser.add_argument("runs", type=int)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(json.dumps(measure(args.namespace, args.jobs, args.runs)))
