"""Debian's headless Chromium through Selenium and Debian's chromedriver: nothing downloaded.

``Service(executable_path=CHROMEDRIVER)`` and ``binary_location = CHROMIUM`` are both given,
so Selenium Manager has nothing to resolve and never reaches the network.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
INSTALL_HINT = "scripts/install-system-deps.sh installs Debian's chromium and chromium-driver"

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1440,1000",
)


@contextlib.contextmanager
def chromium(log_path: Path | None = None) -> Iterator[object]:
    """A Selenium ``webdriver.Chrome`` on Debian's Chromium with a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not path.exists():
            raise RuntimeError(f"{path} is missing: {INSTALL_HINT}")
    with tempfile.TemporaryDirectory(prefix="avw-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        service = Service(
            executable_path=str(CHROMEDRIVER),
            log_output=str(log_path) if log_path else None,
        )
        driver = webdriver.Chrome(service=service, options=options)
        try:
            driver.set_page_load_timeout(60)
            driver.set_script_timeout(30)
            yield driver
        finally:
            driver.quit()
