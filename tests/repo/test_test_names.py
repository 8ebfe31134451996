"""A test's id says what it runs against, read from what it uses (``test_support/name_rules``):
one that talks to the W&B stand-in says ``standin``, one that drives the operator with a stub
task instance (no Airflow: ``StubTaskInstance``) says ``stub``, in its module's or its own name.
A new test that uses either cannot leave it unsaid."""

from __future__ import annotations

import pytest

from test_support.name_rules import MARKS, Uses

USES = Uses()


@pytest.mark.parametrize("word", sorted(MARKS))
def test_a_test_says_in_its_id_what_it_runs_against(word):
    unsaid = sorted(
        node_id
        for node_id, unit in USES.tests()
        if word not in node_id.lower() and USES.uses(unit, word)
    )
    assert not unsaid, f"{len(unsaid)} tests use {MARKS[word]} without {word!r} in their id:\n" + (
        "\n".join(unsaid)
    )


@pytest.mark.parametrize(
    ("module", "word"),
    [
        # A fixture from the folder's conftest.py that starts the stand-in.
        ("tests/integration/test_wandb_standin_artifacts.py", "standin"),
        # A module-level helper that builds the stub, through a module alias.
        ("tests/reliability/test_trustworthy_verdicts.py", "stub"),
        # The stand-in behind the e2e stack, three helpers deep in another module.
        ("tests/e2e/test_airflow_ui_e2e.py", "standin"),
    ],
)
def test_the_rule_sees_uses_through_fixtures_helpers_and_imports(module, word):
    """The guard is only as good as what it finds: these modules' tests use the thing through
    a fixture, an imported module's attribute and a chain of helpers, and it finds them."""
    found = [unit for nid, unit in USES.tests() if nid.startswith(f"{module}::")]
    assert any(USES.uses(unit, word) for unit in found), module
