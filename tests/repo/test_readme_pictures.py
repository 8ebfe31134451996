"""The README's pictures of the Airflow UI show today's manual DAG and today's log lines
(tests/e2e/screenshots.py): each carries the digest of the DAG, its template, its variables
and the provider modules whose lines the pictures show; the trigger form's picture also
carries the titles of the form's fields it shows, and its caption names no other."""

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
        f"{path} was taken from another version of the manual DAG, its template, its "
        f"variables or the provider modules whose lines it shows ({', '.join(screenshots.SHOWN)})"
        ": take the pictures again with `make screenshots`"
    )
    assert "simulated" in caption, f"{path}'s caption must say which parts are simulated"


def caption_names_unshown(caption: str, shows: dict) -> list[str]:
    """The form's field titles the caption names that the picture does not show."""
    named = [t for t in shows["every"] if t and t.lower() in caption.lower()]
    return [t for t in named if t not in shows["shown"]]


def test_the_trigger_forms_caption_names_only_the_fields_it_shows():
    ((caption, path),) = [(c, p) for c, p in PICTURES if "trigger-form" in p]
    shows = screenshots.stamped_shows(screenshots.REPO / path)
    assert shows, f"{path} does not say which fields it shows: `make screenshots`"
    assert not caption_names_unshown(caption, shows), (
        f"{path}'s caption names fields the picture does not show: "
        f"{caption_names_unshown(caption, shows)}"
    )


def test_a_caption_naming_a_field_below_the_fold_is_caught():
    shows = {"shown": ["Worker replicas"], "every": ["Worker replicas", "W&B entity"]}
    assert caption_names_unshown("worker replicas, the W&B entity", shows) == ["W&B entity"]
    assert caption_names_unshown("Worker replicas and more below", shows) == []


def test_a_picture_of_another_dag_is_caught(tmp_path):
    picture = tmp_path / "old.png"
    picture.write_bytes((screenshots.REPO / PICTURES[0][1]).read_bytes())
    screenshots.stamp(picture, "0" * 64)
    assert screenshots.stamped_digest(picture) != screenshots.dag_digest()
    screenshots.stamp_shows(picture, ["a"], ["a", "b"])
    assert screenshots.stamped_shows(picture) == {"shown": ["a"], "every": ["a", "b"]}


def test_every_module_the_stamp_covers_exists():
    assert all((screenshots.REPO / name).is_file() for name in screenshots.SHOWN)
