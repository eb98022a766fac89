"""A real browser for the dashboard's tests: Debian's headless Chromium through Selenium.

The browser and its driver are the distribution's (``/usr/bin/chromium``,
``/usr/bin/chromedriver``, installed by ``make tools``), given to Selenium by path so
that Selenium Manager never downloads anything. Without them the tests fail, with what
to run: a missing browser is a broken test machine, not a reason to skip.

Every test leaves a screenshot and the browser's console in ``test-artifacts/`` at the
repository's root (git-ignored), taken when the test ends, passed or failed.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service

from tests.support.cluster import Cluster, running_cluster

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def new_driver(width: int = 1400, height: int = 1000) -> webdriver.Chrome:
    """A headless Chromium of Debian's, driven by Debian's chromedriver."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.fail(
            f"the browser tests need {' and '.join(missing)}: run `make tools` "
            "(it installs Debian's chromium and chromium-driver)",
            pytrace=False,
        )
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in (
        "--headless=new",
        "--no-sandbox",  # root in a container has no user namespace for the sandbox
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)


@pytest.fixture
def driver(request: pytest.FixtureRequest) -> Iterator[webdriver.Chrome]:
    """A fresh browser for one test; its screenshot and console kept as artifacts."""
    browser = new_driver()
    try:
        yield browser
    finally:
        ARTIFACTS.mkdir(exist_ok=True)
        name = request.node.name.replace("/", "_")
        try:
            with contextlib.suppress(NoAlertPresentException):  # (a failed test's)
                browser.switch_to.alert.dismiss()
            browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))
            console = browser.get_log("browser")
            (ARTIFACTS / f"{name}.console.json").write_text(json.dumps(console, indent=1))
        finally:
            browser.quit()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three nodes with their HTTP ports, one cluster a module, shared by its tests that
    kill nothing (each uses queues of its own)."""
    with running_cluster(tmp_path_factory.mktemp("dash"), 3, http=True) as c:
        yield c
