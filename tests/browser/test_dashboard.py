"""The dashboard in a real browser against a real three-node cluster.

Each scenario loads the page a node serves on its HTTP port in headless Chromium and
watches it follow the cluster: what redis-cli does shows up on the page, what the
page's buttons do shows up in redis-cli, a killed node turns failed, hostile queue
names and job bodies stay text, and a password-protected cluster asks for its
password once. Every wait is a condition with a generous deadline (the page polls
once a second); every test leaves a screenshot in ``test-artifacts/`` (conftest.py).

``DISQUETTE_README_SCREENSHOT=1`` makes :func:`test_screenshot` write the README's
picture, ``docs/images/dashboard.png``, as well.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import (
    ElementClickInterceptedException,
    NoAlertPresentException,
    StaleElementReferenceException,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support.ui import Select, WebDriverWait

from disquette import __version__
from disquette.core.dialect import PROTOCOL
from tests.browser.conftest import ARTIFACTS
from tests.support.cluster import Cluster, running_cluster
from tests.support.servers import redis_cli

DEADLINE = 60.0  # seconds: generous, the machine may be loaded
PASSWORD = "s3cret pass"
README_IMAGE = Path(__file__).resolve().parents[2] / "docs" / "images" / "dashboard.png"

# Rows as the page shows them, read in one script (no element goes stale in between).
NODES_JS = """return Array.from(document.querySelectorAll('#nodes tbody tr'),
  r => ({id: r.dataset.id, state: r.dataset.state, jobs: r.cells[4].textContent,
         release: r.cells[1].querySelector('.release').textContent}));"""
QUEUES_JS = """return Array.from(document.querySelectorAll('#queues tbody tr'),
  r => ({name: r.querySelector('.name').textContent, len: r.cells[1].textContent,
         paused: r.dataset.paused}));"""
QUEUE_ROW_JS = """return Array.from(document.querySelectorAll('#queues tbody tr'))
  .find(r => r.querySelector('.name').textContent === arguments[0]) || null;"""
HISTORY_POINTS_JS = """const line = document.querySelector('#history polyline.line-in');
  return line ? line.getAttribute('points').split(' ').length : 0;"""
DIALOG_OPEN_JS = "return document.getElementById(arguments[0]).open;"


class Dashboard:
    """The page of one node, seen through the browser."""

    def __init__(self, driver: WebDriver, url: str) -> None:
        self.driver = driver
        self.url = url

    def open(self) -> Dashboard:
        self.driver.get(self.url + "/")
        return self

    def wait(self, condition: Callable[[], Any], what: str, timeout: float = DEADLINE) -> Any:
        return WebDriverWait(
            self.driver, timeout, poll_frequency=0.1,
            ignored_exceptions=(StaleElementReferenceException, ElementClickInterceptedException),
        ).until(lambda _: condition(), message=f"timed out waiting for {what}")  # fmt: skip

    def live(self) -> Dashboard:
        self.wait(lambda: self.by_id("status").get_attribute("data-state") == "live", "a poll")
        return self

    def by_id(self, element_id: str) -> WebElement:
        return self.driver.find_element(By.ID, element_id)

    def nodes(self) -> dict[str, dict[str, str]]:
        return {row["id"]: row for row in self.driver.execute_script(NODES_JS)}

    def states(self) -> dict[str, str]:
        return {node_id: row["state"] for node_id, row in self.nodes().items()}

    def queues(self) -> dict[str, dict[str, str]]:
        return {row["name"]: row for row in self.driver.execute_script(QUEUES_JS)}

    def filter(self, prefix: str) -> None:
        box = self.by_id("queue-prefix")
        box.send_keys(Keys.CONTROL, "a")
        box.send_keys(Keys.DELETE, prefix)

    def per_page(self, n: int) -> None:
        Select(self.by_id("queue-limit")).select_by_visible_text(str(n))

    def press(self, name: str, kind: str) -> None:
        """Click the ``kind`` button (browse, pause, add) of the row of queue ``name``,
        again if a poll moved it under the pointer."""

        def pressed() -> bool:
            row = self.driver.execute_script(QUEUE_ROW_JS, name)
            if row is None:
                return False
            row.find_element(By.CSS_SELECTOR, f"button.{kind}").click()
            return True

        self.wait(pressed, f"the {kind} button of queue {name!r}")

    def open_first_job(self) -> None:
        """Click the first job of the job browser (once a poll listed one)."""

        def opened() -> bool:
            links = self.driver.find_elements(By.CSS_SELECTOR, "#jobs a.job-link")
            if links:
                links[0].click()
            return bool(links)

        self.wait(opened, "a job in the job browser")

    def dialog_open(self, dialog_id: str) -> bool:
        return bool(self.driver.execute_script(DIALOG_OPEN_JS, dialog_id))

    def confirm(self) -> None:
        self.wait(lambda: self.dialog_open("confirm"), "the confirmation dialog")
        self.by_id("confirm-ok").click()
        self.wait(lambda: not self.dialog_open("confirm"), "the dialog to close")


def ids(cluster: Cluster) -> list[str]:
    return [node_id.decode() for node_id in cluster.ids]


@pytest.fixture
def page(driver: WebDriver, cluster: Cluster) -> Dashboard:
    return Dashboard(driver, cluster.servers[0].http_url).open().live()


def test_three_nodes_ok(page: Dashboard, cluster: Cluster) -> None:
    expected = dict.fromkeys(ids(cluster), "ok")
    page.wait(lambda: page.states() == expected, "three nodes ok")
    assert page.by_id("unanswered").get_attribute("hidden") is not None
    # Each node's release and bus protocol, as the serving node knows them.
    release = f"{__version__} · bus {PROTOCOL}"
    releases = dict.fromkeys(ids(cluster), release)
    page.wait(
        lambda: {i: row["release"] for i, row in page.nodes().items()} == releases, "releases"
    )


def test_job_added_with_redis_cli_appears(page: Dashboard, cluster: Cluster) -> None:
    page.filter("appears-")
    no_queue = "no queue with this prefix"
    page.wait(lambda: page.by_id("queue-page").text == no_queue, "the filtered, empty page")
    job = redis_cli(cluster.servers[1].port, "ADDJOB", "appears-q", "hello", "0")
    assert job.startswith("D-")
    page.wait(lambda: page.queues().get("appears-q", {}).get("len") == "1", "the queue, length 1")
    node1 = ids(cluster)[1]
    page.wait(lambda: int(page.nodes()[node1]["jobs"].replace(",", "")) >= 1, "node 1's job")


def test_pause_with_the_button(page: Dashboard, cluster: Cluster) -> None:
    redis_cli(cluster.servers[0].port, "ADDJOB", "pause-q", "body", "0")
    page.filter("pause-")

    def paused_everywhere(state: str) -> bool:
        return all(redis_cli(s.port, "PAUSE", "pause-q", "STATE") == state for s in cluster.servers)

    page.press("pause-q", "pause")
    page.wait(lambda: page.dialog_open("confirm"), "the pause dialog")
    assert page.by_id("pause-state").get_attribute("value") == "all"
    page.confirm()
    page.wait(lambda: paused_everywhere("all"), "PAUSE pause-q STATE: all, on every node")
    page.wait(lambda: page.queues()["pause-q"]["paused"] == "all", "the page's paused badge")
    # The same button resumes (its dialog proposes "none" for a paused queue).
    page.press("pause-q", "pause")
    page.confirm()
    page.wait(lambda: paused_everywhere("none"), "PAUSE pause-q STATE: none, on every node")


def test_cancelled_action_does_nothing(page: Dashboard, cluster: Cluster) -> None:
    redis_cli(cluster.servers[0].port, "ADDJOB", "cancel-q", "body", "0")
    page.filter("cancel-")
    page.press("cancel-q", "pause")
    page.wait(lambda: page.dialog_open("confirm"), "the pause dialog")
    page.by_id("confirm-cancel").click()
    page.wait(lambda: not page.dialog_open("confirm"), "the dialog to close")
    page.live()
    assert redis_cli(cluster.servers[0].port, "PAUSE", "cancel-q", "STATE") == "none"


HOSTILE = [
    "<img src=x onerror=alert(1)>",
    "</script><script>alert(2)</script>",
    "\"'><svg onload=alert(3)>",
]
NOT_UTF8 = b"\xff\xfe<b>bold</b>"


def assert_nothing_injected(driver: WebDriver) -> None:
    """No element came from data (the page itself has no img, no b, one script) and no
    alert opened."""
    assert driver.find_elements(By.TAG_NAME, "img") == []
    assert driver.find_elements(By.TAG_NAME, "b") == []
    assert driver.find_elements(By.CSS_SELECTOR, "[onerror], [onload]") == []
    assert len(driver.find_elements(By.TAG_NAME, "script")) == 1
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018  (reading it is the check)


def test_hostile_names_and_bodies_render_as_text(page: Dashboard, cluster: Cluster) -> None:
    r = cluster.clients[0]
    for name in HOSTILE:
        r.execute_command("ADDJOB", name, name, 0)
    r.execute_command("ADDJOB", NOT_UTF8, NOT_UTF8, 0)
    page.per_page(100)
    page.wait(lambda: set(HOSTILE) <= set(page.queues()), "the hostile queue names, as text")
    page.wait(
        lambda: any(name.endswith("<b>bold</b>") for name in page.queues()),
        "the non-UTF-8 queue name",
    )
    assert_nothing_injected(page.driver)

    for name in [*HOSTILE, next(n for n in page.queues() if n.endswith("<b>bold</b>"))]:
        page.press(name, "browse")
        page.wait(
            lambda name=name: (
                page.by_id("browse-name").text == name and name.rstrip() in page.by_id("jobs").text
            ),
            f"the jobs of {name!r}, body shown",
        )
        assert_nothing_injected(page.driver)

    page.press(HOSTILE[0], "browse")
    page.wait(lambda: HOSTILE[0] in page.by_id("jobs").text, "the queue's jobs")
    page.open_first_job()
    page.wait(lambda: HOSTILE[0] in page.by_id("job-detail").text, "the job's SHOW fields")
    assert_nothing_injected(page.driver)


def test_job_search_shows_copies(page: Dashboard, cluster: Cluster) -> None:
    job = redis_cli(cluster.servers[2].port, "ADDJOB", "search-q", "find me", "0", "REPLICATE", "3")
    page.by_id("job-id").send_keys(job + "\n")
    page.wait(lambda: "find me" in page.by_id("job-detail").text, "the job's fields")
    page.wait(lambda: page.by_id("job-sync").text.startswith("synchronised"), "3 live of 3")
    assert "3 live of 3" in page.by_id("job-sync").text


# Every element showing a node's ID (the whole ID in its title), and what it shows.
IDS_SHOWN_JS = """return Array.from(document.querySelectorAll('[title]'))
  .filter(e => /^[0-9a-f]{40}$/.test(e.title) && e.textContent.trim())
  .map(e => [e.title, e.textContent.trim()]);"""
JOB_FIELDS_JS = """return Object.fromEntries(Array.from(
  document.querySelectorAll('#job-detail dd[data-field]'),
  d => [d.dataset.field, d.textContent]));"""
DATA_SINCE_JS = """return Array.from(document.querySelectorAll('#nodes tbody tr'),
  r => r.cells[11].textContent);"""


def test_times_durations_and_ids_read_as_such(page: Dashboard, cluster: Cluster) -> None:
    """The page showed ``generation 1795847761529``, ``ctime 1795847845403000000``,
    ``next_requeue_within 253257`` without a unit, and node IDs cut to 8 characters in
    one table and 6 in another; the sparkline was a nearly invisible dash."""
    job = redis_cli(cluster.servers[0].port, "ADDJOB", "readable-q", "read me", "0",
                    "REPLICATE", "2", "RETRY", "300")  # fmt: skip
    page.filter("readable-")
    # The filter applied (the shared cluster holds other modules' queues): the first
    # row's sparkline below is this queue's.
    page.wait(lambda: list(page.queues()) == ["readable-q"], "only the queue filtered for")
    page.wait(lambda: page.queues()["readable-q"]["len"] == "1", "the queue")
    # The node table: when each node's data began, as a date and time.
    since = page.driver.execute_script(DATA_SINCE_JS)
    assert len(since) == 3 and all(":" in t and not t.isdigit() for t in since), since
    # The job's fields: times as times, durations with their unit, IDs short.
    page.by_id("job-id").send_keys(job + "\n")
    page.wait(lambda: "read me" in page.by_id("job-detail").text, "the job's fields")
    fields = page.driver.execute_script(JOB_FIELDS_JS)
    assert fields["ctime"].endswith(" ago)") and ":" in fields["ctime"], fields
    assert re.fullmatch(r"in (\d+m )?\d+s", fields["next_requeue_within"]), fields
    assert re.fullmatch(r"\d+h \d+m left|1d 0h left", fields["ttl"]), fields
    assert fields["retry"] == "5m 0s" and fields["delay"] == "0s", fields
    assert all(len(i) == 9 and i.endswith("…") for i in fields["nodes_delivered"].split(", "))
    # Every node ID on the page: its first 8 characters, everywhere.
    page.wait(lambda: page.driver.find_elements(By.CSS_SELECTOR, "#queues .chip"), "the chips")
    shown = page.driver.execute_script(IDS_SHOWN_JS)
    assert shown and all(text.startswith(f"{node_id[:8]}…") for node_id, text in shown), shown
    assert {text.split()[0] for _, text in shown} <= {f"{i[:8]}…" for i in ids(cluster)}
    # The sparkline: a framed box with the area under the line filled, and its maximum.
    page.wait(
        lambda: page.driver.find_elements(By.CSS_SELECTOR, "#queues svg.spark polygon.area"),
        "the sparkline",
    )
    # (measured in the page in one step: the refresh may replace the element meanwhile)
    width, height = page.driver.execute_script(
        "const box = document.querySelector('#queues svg.spark').getBoundingClientRect();"
        "return [box.width, box.height];"
    )
    assert height >= 28 and width >= 100
    assert page.driver.find_element(By.CSS_SELECTOR, "#queues .spark-max").text == "max 1"
    page.by_id("job-detail").location_once_scrolled_into_view  # noqa: B018 (the screenshot's)


def test_killed_node_turns_failed(tmp_path: Path, driver: WebDriver) -> None:
    with running_cluster(tmp_path, 3, ["--cluster-node-timeout", "2000"], http=True) as c:
        page = Dashboard(driver, c.servers[0].http_url).open().live()
        victim = ids(c)[2]
        page.wait(lambda: set(page.states().values()) == {"ok"}, "three nodes ok")
        c.kill(2)
        page.wait(lambda: page.states()[victim] in ("pfail", "fail", "unreachable"), "no answer")
        page.wait(lambda: page.states()[victim] == "fail", "the killed node flagged fail")
        assert victim[:8] in page.by_id("unanswered").text
        assert page.states()[ids(c)[0]] == "ok"


def test_password_asked_once(tmp_path: Path, driver: WebDriver) -> None:
    c = Cluster(tmp_path, 3, ["--requirepass", PASSWORD], http=True)
    try:
        c.start(meet=False)
        c.clients = [s.client(password=PASSWORD) for s in c.servers]
        c.meet_all()
        page = Dashboard(driver, c.servers[0].http_url).open()
        page.wait(lambda: page.dialog_open("login"), "the password dialog")
        page.by_id("login-password").send_keys("wrong\n")
        page.wait(lambda: page.by_id("login-error").is_displayed(), "wrong password said")
        page.by_id("login-password").send_keys(PASSWORD + "\n")
        page.wait(lambda: set(page.states().values()) == {"ok"} and len(page.states()) == 3,
                  "three nodes ok behind the password")  # fmt: skip
        # Kept for the tab: a reload does not ask again.
        page.open().live()
        assert not page.dialog_open("login")
    finally:
        c.stop()


def test_screenshot(tmp_path: Path, driver: WebDriver) -> None:
    """A populated page, kept as an artifact (and as the README's picture on demand)."""
    with running_cluster(tmp_path, 3, http=True) as cluster:
        screenshot(driver, cluster)
    if os.environ.get("DISQUETTE_README_SCREENSHOT") == "1":
        README_IMAGE.parent.mkdir(exist_ok=True)
        shutil.copyfile(ARTIFACTS / "dashboard.png", README_IMAGE)


def screenshot(driver: WebDriver, cluster: Cluster) -> None:
    r = cluster.clients[0]
    for i, name in enumerate(["emails", "thumbnails", "invoices", "webhooks", "reports"]):
        for j in range(3 * i + 2):
            r.execute_command("ADDJOB", name, f"job {j} of {name}", 0, "REPLICATE", 2)
    r.execute_command("PAUSE", "reports", "all", "BCAST")
    stop = threading.Event()

    def traffic() -> None:  # jobs in and out in waves, for the rates and the charts
        tick = 0
        while not stop.wait(0.05):
            tick += 1
            for _ in range(1 + tick // 10 % 4):
                r.execute_command("ADDJOB", "webhooks", "ping", 0)
            if tick % 3:
                r.execute_command("GETJOB", "NOHANG", "COUNT", 3, "FROM", "webhooks")

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        driver.set_window_size(1400, 1250)
        page = Dashboard(driver, cluster.servers[0].http_url).open().live()
        # The README's picture waits for some history; a test run, for the first points.
        seconds = 30 if os.environ.get("DISQUETTE_README_SCREENSHOT") == "1" else 2
        page.wait(
            lambda: (
                driver.execute_script(HISTORY_POINTS_JS) >= seconds
                and driver.find_elements(By.CSS_SELECTOR, "#queues svg.spark")
            ),
            "the history chart and the sparklines",
        )
        page.press("emails", "browse")
        page.open_first_job()
        page.wait(lambda: "job 0 of emails" in page.by_id("job-detail").text, "the job's fields")
        driver.execute_script("window.scrollTo(0, 0)")
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "dashboard.png"))
    finally:
        stop.set()
        thread.join()
