"""The README's pictures of the Airflow UI show today's manual DAG (tests/e2e/screenshots.py):
each carries the digest of the DAG, its template and its variables it was taken from."""

from __future__ import annotations

import re

import pytest

from tests.e2e import screenshots

README = (screenshots.REPO / "README.md").read_text()
PICTURES = re.findall(r"!\[([^\]]*)\]\((docs/images/[^)]+\.png)\)", README)


def test_the_readme_shows_pictures():
    assert len(PICTURES) >= 4, PICTURES


@pytest.mark.parametrize(("caption", "path"), PICTURES, ids=[p for _, p in PICTURES])
def test_each_picture_shows_todays_dag_and_says_what_is_simulated(caption, path):
    stamped = screenshots.stamped_digest(screenshots.REPO / path)
    assert stamped == screenshots.dag_digest(), (
        f"{path} was taken from another version of the manual DAG, its template or its "
        "variables: take the pictures again with `make screenshots`"
    )
    assert "simulated" in caption, f"{path}'s caption must say which parts are simulated"


def test_a_picture_of_another_dag_is_caught(tmp_path):
    picture = tmp_path / "old.png"
    picture.write_bytes((screenshots.REPO / PICTURES[0][1]).read_bytes())
    screenshots.stamp(picture, "0" * 64)
    assert screenshots.stamped_digest(picture) != screenshots.dag_digest()
