"""The browser tests' Chromium (Debian's chromium and chromium-driver through Selenium): one per
module, a fresh page per test, screenshots and logging in; skipped where either is missing."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from stash_pipeline_tests.support.api_helpers import Api
from stash_pipeline_tests.support.waiting import REQUEST_S, bound

SCREENSHOTS_DIR = os.environ.get("STASH_SCREENSHOTS")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")
WIDTH, HEIGHT = 1360, 1000  # the browser's window, and the screenshots' width

pytestmark = pytest.mark.skipif(
    CHROMEDRIVER is None or CHROMIUM is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install chromium "
           "chromium-driver; .ci/run installs them)")


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """The module's browser: starting Chromium costs about a second of CPU, so the module's tests
    share one, each from a blank page with no cookies and no cache (``browser``)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 f"--window-size={WIDTH},{HEIGHT}", "--disable-extensions", "--no-first-run"):
        options.add_argument(flag)
    # An explicit driver path: Selenium Manager never downloads a browser or a driver.
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(bound(REQUEST_S))  # a page's element may come late on a busy machine
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser(chromium) -> object:
    """The module's browser as a fresh one: a blank page, no cookies (no test's login carries
    over to the next), an empty cache and the default window size."""
    chromium.get("about:blank")
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    chromium.execute_cdp_cmd("Network.clearBrowserCache", {})
    chromium.set_window_size(WIDTH, HEIGHT)
    return chromium


def shoot(driver, name: str, store_kind: str) -> None:
    if store_kind == "sqlite":  # one set of pictures; the PostgreSQL run checks the same flow
        folder = Path(SCREENSHOTS_DIR or Path(tempfile.gettempdir()) / "stash-screenshots")
        folder.mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(WIDTH, min(max(height, 600), 3000))  # the whole page
        driver.save_screenshot(str(folder / f"{name}.png"))
        driver.set_window_size(WIDTH, HEIGHT)


def log_in(driver, api: Api, key: str) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"{api.url}/ui/traces")
    assert "/ui/login" in driver.current_url
    driver.find_element(By.ID, "api_key").send_keys(key)
    driver.find_element(By.ID, "login").click()
    assert driver.find_element(By.ID, "trace-table")
