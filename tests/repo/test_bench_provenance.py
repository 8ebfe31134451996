"""Every figure in ``bench/results/latest.json`` was written by the code that measured it, with
its provenance, and no goal reads "met" on a figure that is missing."""

from __future__ import annotations

import contextlib
import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import report as bench_report  # noqa: E402
import results_file  # noqa: E402

LATEST = json.loads((BENCH / "results" / "latest.json").read_text())
SCENARIO_METAS = LATEST.get("scenario_meta", {})


def test_every_figure_in_latest_json_belongs_to_a_scenario_with_its_provenance():
    figure_keys = set(LATEST) - {"goals", "meta", "scenario_meta"}
    owners = {key: name for name, module in bench_report.SCENARIOS.items() for key in module.KEYS}
    assert figure_keys <= set(owners), f"no scenario writes {sorted(figure_keys - set(owners))}"
    orphans = {key for key in figure_keys if owners[key] not in SCENARIO_METAS}
    assert not orphans, f"figures without their scenario's provenance: {sorted(orphans)}"


@pytest.mark.parametrize("scenario", sorted(SCENARIO_METAS))
def test_each_scenarios_provenance_is_what_run_all_writes(scenario):
    meta = SCENARIO_METAS[scenario]
    assert set(results_file.REQUIRED) <= set(meta) <= set(results_file.PROVENANCE), (
        f"{scenario}: provenance keys {sorted(meta)}; run_all writes "
        f"{sorted(results_file.PROVENANCE)} (a key of another name was written by hand)"
    )
    assert re.fullmatch(r"[0-9a-f]{7,40}", meta["commit"] or ""), f"{scenario}: no commit"
    assert meta["how"].split()[0] == "bench/run_all.py", f"{scenario}: written by {meta['how']}"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", meta["date"]), meta["date"]
    assert isinstance(meta["load_before"], float | int) and meta.get("took_s", 1) > 0


def test_the_files_meta_and_goals_are_what_the_code_derives_from_the_figures():
    dates = [meta["date"] for meta in SCENARIO_METAS.values()]
    assert LATEST["meta"]["last_written"] == max(dates)
    assert LATEST["goals"] == bench_report.goals(LATEST)
    latest_md = (BENCH / "results" / "latest.md").read_text()
    assert latest_md == bench_report.markdown(LATEST), "latest.md is not latest.json's report"


def test_record_refuses_figures_without_their_provenance(tmp_path):
    with pytest.raises(ValueError, match="provenance"):
        results_file.record("render", {"render_ms": {}}, {"date": "2026-12-06"}, tmp_path)


class _Reads(dict):
    """A scenario's figures that note each key a goal reads, as a path from the scenario."""

    def __init__(self, data: dict, path: tuple, seen: list) -> None:
        super().__init__({k: _watched(v, (*path, k), seen) for k, v in data.items()})
        self._path, self._seen = path, seen

    def __getitem__(self, key: Any) -> Any:
        self._seen.append((*self._path, key))
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._seen.append((*self._path, key))
        return super().get(key, default)


def _watched(value: Any, path: tuple, seen: list) -> Any:
    if isinstance(value, dict):
        return _Reads(value, path, seen)
    if isinstance(value, list):
        return [_watched(v, (*path, i), seen) for i, v in enumerate(value)]
    return value


def _without(figures: Any, path: tuple) -> Any:
    out = copy.deepcopy(figures)
    *parents, last = path
    holder = out
    for step in parents:
        holder = holder[step]
    if isinstance(holder, list):
        holder[last] = None
    else:
        del holder[last]
    return out


def _reads_of_goals(scenario: str, figures: Any) -> list[tuple]:
    seen: list[tuple] = []
    # A figure already missing ends the goals early: the reads before it still count.
    with contextlib.suppress(KeyError, IndexError, TypeError, LookupError):
        bench_report.SCENARIOS[scenario].goals(_watched(figures, (), seen))
    return [path for path in dict.fromkeys(seen) if _leaf(figures, path)]


def _leaf(figures: Any, path: tuple) -> bool:
    value = figures
    for step in path:
        try:
            value = value[step]
        except (KeyError, IndexError, TypeError):
            return False
    return not isinstance(value, dict | list)


SCENARIOS_WITH_GOALS = sorted(
    name
    for name, module in bench_report.SCENARIOS.items()
    if hasattr(module, "goals") and module.KEYS[0] in LATEST
)


@pytest.mark.parametrize("scenario", SCENARIOS_WITH_GOALS)
def test_no_goal_reads_met_on_a_figure_that_is_missing(scenario):
    """Each figure a goal reads, taken away in turn: the goals change, and every line that
    still reads "met" is one the complete figures gave, word for word (a goal that defaulted the
    missing figure to a good value would read "met" with other words, or not change at all)."""
    key = bench_report.SCENARIOS[scenario].KEYS[0]
    figures = LATEST[key]
    before = bench_report.goals({key: figures})
    reads = _reads_of_goals(scenario, figures)
    assert reads, f"{scenario}'s goals read no figure"
    for path in reads:
        after = bench_report.goals({key: _without(figures, path)})
        assert after != before, f"{scenario}: the goals ignore a missing {path}"
        new_met = [line for line in after if re.search(r"\bmet\b", line) and line not in before]
        assert not new_met, f"{scenario}: 'met' without {path}: {new_met}"


def test_a_scenario_that_did_not_run_reads_not_measured():
    assert "handover: not measured" in bench_report.goals({})
    missing = bench_report.goals({"handover": {"jobs": 4, "jobs_deleted": 0, "wrong_verdicts": 0}})
    assert missing[bench_report.goals({}).index("handover: not measured")].startswith(
        "handover: not measured (a figure is missing"
    )
