"""The few Airflow 3 UI interactions the end-to-end test needs (Selenium, explicit waits).

Selectors follow what Airflow 3.3's React UI renders: the Trigger form's param fields are
inputs named ``element_<param>`` inside a Chakra field whose label and helper text have the
ids ``field::<id>::label`` and ``field::<id>::helper-text``; number params carry their limits
as ``aria-valuemin``/``aria-valuemax``; the Configuration JSON is a Monaco editor.
"""

from __future__ import annotations

import json
import re
from typing import Any

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import WebDriverWait

WAIT = 30  # seconds for any one UI element or state


def _wait(driver: WebDriver, condition, what: str, timeout: float = WAIT):
    return WebDriverWait(driver, timeout, poll_frequency=0.25).until(
        condition, message=f"timed out after {timeout}s waiting for {what}"
    )


def open_trigger_form(driver: WebDriver, base_url: str, dag_id: str) -> WebElement:
    driver.get(f"{base_url}/dags/{dag_id}")
    _shown(driver, "//button[normalize-space()='Trigger']", "the DAG page's Trigger button").click()
    dialog = _wait(driver, lambda d: _trigger_dialog(d), "the Trigger Dag dialog")
    _wait(driver, lambda d: dialog.find_elements(By.NAME, "element_worker_replicas"), "params")
    return dialog


def _shown(driver: WebDriver, xpath: str, what: str) -> WebElement:
    """The first displayed element at ``xpath``, once there is one."""
    return _wait(driver, lambda d: _displayed(d.find_elements(By.XPATH, xpath)), what)


def _displayed(elements: list[WebElement]) -> WebElement | None:
    return next((e for e in elements if e.is_displayed()), None)


def _trigger_dialog(driver: WebDriver) -> WebElement | None:
    for dialog in driver.find_elements(By.XPATH, "//*[@role='dialog']"):
        if dialog.is_displayed() and "Trigger Dag" in dialog.text:
            return dialog
    return None


def param_fields(dialog: WebElement) -> dict[str, dict[str, Any]]:
    """``{param: {title, description, min, max, value}}`` as the form renders them."""
    fields: dict[str, dict[str, Any]] = {}
    for inp in dialog.find_elements(By.CSS_SELECTOR, "input[name^='element_']"):
        name = inp.get_attribute("name").removeprefix("element_")
        field_id = _field_id(inp)
        assert field_id, f"param {name}: no labelled field around its input"
        label = dialog.find_element(By.ID, f"field::{field_id}::label")
        helpers = dialog.find_elements(By.ID, f"field::{field_id}::helper-text")
        fields[name] = {
            "title": label.text.replace("*", "").strip(),
            "description": helpers[0].text.strip() if helpers else "",
            "min": inp.get_attribute("aria-valuemin"),
            "max": inp.get_attribute("aria-valuemax"),
            "value": inp.get_attribute("value"),
        }
    return fields


def _field_id(inp: WebElement) -> str | None:
    """The id of the form field holding ``inp``.

    A text or number input names its helper text in ``aria-describedby``; a select (an enum
    param) does not, so its field is found through the label of the field that encloses it.
    """
    described_by = inp.get_attribute("aria-describedby") or ""
    match = re.fullmatch(r"field::(.+)::helper-text", described_by)
    if match:
        return match.group(1)
    is_label = "starts-with(@id, 'field::') and contains(@id, '::label')"
    labels = inp.find_elements(By.XPATH, f"./ancestor::*[.//*[{is_label}]][1]//*[{is_label}]")
    if len(labels) != 1:
        return None
    return labels[0].get_attribute("id").removeprefix("field::").removesuffix("::label")


def field_value(dialog: WebElement, param: str) -> str:
    return dialog.find_element(By.NAME, f"element_{param}").get_attribute("value")


def type_number(driver: WebDriver, dialog: WebElement, param: str, text: str) -> str:
    """Replace a number field's content by typing, leave the field; return what it holds."""
    inp = dialog.find_element(By.NAME, f"element_{param}")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", inp)
    inp.click()
    inp.send_keys(Keys.CONTROL, "a")
    inp.send_keys(text)
    _wait(driver, lambda d: inp.get_attribute("value") == text, f"{param} to read {text}")
    inp.send_keys(Keys.TAB)
    return inp.get_attribute("value")


def set_configuration_json(driver: WebDriver, dialog: WebElement, conf: dict[str, Any]) -> None:
    """Type ``conf`` into the form's Configuration JSON editor (under Advanced Options)."""
    editors = dialog.find_elements(By.CSS_SELECTOR, ".monaco-editor")
    if not editors or not editors[0].is_displayed():
        toggle = dialog.find_element(By.XPATH, ".//button[normalize-space()='Advanced Options']")
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", toggle)
        toggle.click()
    editor = _wait(
        driver,
        lambda d: _displayed(dialog.find_elements(By.CSS_SELECTOR, ".monaco-editor")),
        "the Configuration JSON editor",
    )
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", editor)
    # Focus the editor's text (not the page: Ctrl+A would select the whole page).
    content = editor.find_element(By.CSS_SELECTOR, ".view-lines")

    def editor_focused(d: WebDriver) -> WebElement | None:
        if not d.execute_script("return arguments[0].contains(document.activeElement)", editor):
            content.click()
            return None
        return d.switch_to.active_element

    box = _wait(driver, editor_focused, "the Configuration JSON editor to take the focus")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys(Keys.DELETE)
    text = json.dumps(conf)
    box.send_keys(text)  # Monaco types over the brackets and quotes it auto-closes
    _wait(driver, lambda d: _editor_json(editor) == conf, f"the editor to hold {text}")
    # Leave the editor so the form takes the JSON into its fields.
    dialog.find_element(By.XPATH, ".//label[normalize-space()='Configuration JSON']").click()


def _editor_json(editor: WebElement) -> Any:
    lines = editor.find_elements(By.CSS_SELECTOR, ".view-lines .view-line")
    text = "\n".join(line.text for line in lines).replace("\u00a0", " ")
    try:
        return json.loads(text)
    except ValueError:
        return None


def submit_trigger_form_expecting_error(driver: WebDriver, dialog: WebElement) -> str:
    """Click the form's Trigger button; return the error the form shows (it must stay open)."""
    button = dialog.find_element(By.XPATH, ".//button[normalize-space()='Trigger']")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", button)
    button.click()

    def error_shown(d: WebDriver) -> str | None:
        text = dialog.text
        return text if "Bad Request" in text or "Invalid input" in text else None

    text = _wait(driver, error_shown, "the Trigger form's error")
    assert _trigger_dialog(driver) is not None, "the Trigger form closed: the run was accepted"
    return text


def extra_link_href(
    driver: WebDriver, base_url: str, dag_id: str, dag_run_id: str, task_id: str, name: str
) -> str:
    """Open the task instance's Details tab; return the href of its extra link ``name``.

    Airflow 3.3 lists a task's extra links under "Extra Links" in that tab, as ``<a>`` buttons.
    """
    driver.get(f"{base_url}/dags/{dag_id}/runs/{dag_run_id}/tasks/{task_id}")
    tab = _shown(driver, "//a[normalize-space()='Details']", "the task instance's Details tab")
    tab.click()
    link = _shown(driver, f"//a[normalize-space()='{name}']", f"the task instance's {name!r} link")
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
    return link.get_attribute("href")


def task_log_text(
    driver: WebDriver, base_url: str, dag_id: str, dag_run_id: str, task_id: str, expected: str
) -> str:
    """Open the task instance's page (Airflow 3.3 opens it on its Logs tab); return the page's
    text once ``expected`` is in it, scrolled so the first line holding it is in view."""
    driver.get(f"{base_url}/dags/{dag_id}/runs/{dag_run_id}/tasks/{task_id}")
    line = _wait(
        driver,
        lambda d: _displayed(
            d.find_elements(By.XPATH, f"//*[contains(text(), {json.dumps(expected)})]")
        ),
        f"{expected!r} in the task's log",
    )
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", line)
    return driver.find_element(By.TAG_NAME, "body").text
