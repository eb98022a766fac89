"""The dashboard's failed jobs in a real browser against a real three-node cluster.

Dead letters made for real (a queue policy's, a worker's with its traceback) show up in
the section once it is opened; a traceback opens as text, however hostile; a filter
narrows the table; the row's tick box and *retry selected…* put a job back on its
origin queue, *delete all matching…* removes the rest, and redis-cli sees both. Each
test leaves its screenshot in ``test-artifacts/`` (conftest.py).
"""

from __future__ import annotations

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver

import disquette
from tests.browser.test_dashboard import Dashboard, assert_nothing_injected
from tests.support.cluster import Cluster
from tests.support.dead_letters import policy_dead_letters, worker_dead_letters
from tests.support.servers import redis_cli

HOSTILE = "<img src=x onerror=alert(1)> bad row"
# The rows of the failed jobs' table as the page shows them, read in one script.
FAILED_JS = """return Array.from(document.querySelectorAll('#failed-jobs tbody tr'),
  r => ({id: r.dataset.key, queue: r.cells[2].textContent, origin: r.cells[3].textContent,
         reason: r.cells[5].querySelector('summary').textContent}));"""
OPEN_FAILURE_JS = """const row = Array.from(document.querySelectorAll('#failed-jobs tbody tr'))
  .find(r => r.dataset.key === arguments[0]);
row.querySelector('details.failure summary').click();
return row.querySelector('pre.traceback').textContent;"""


class FailedJobs(Dashboard):
    """The dashboard's section of failed jobs."""

    def open_section(self) -> FailedJobs:
        self.driver.find_element(By.CSS_SELECTOR, "#failed > summary").click()
        self.wait(lambda: self.by_id("failed-page").text, "the first reading")
        return self

    def rows(self) -> dict[str, dict[str, str]]:
        return {row["id"]: row for row in self.driver.execute_script(FAILED_JS)}

    def type_filter(self, box: str, text: str) -> None:
        field = self.by_id(box)
        field.send_keys(Keys.CONTROL, "a")
        field.send_keys(Keys.DELETE, text)

    def tick(self, job_id: str) -> None:
        self.driver.find_element(
            By.CSS_SELECTOR, f'#failed-jobs tr[data-key="{job_id}"] input.pick'
        ).click()


@pytest.fixture
def page(driver: WebDriver, cluster: Cluster) -> FailedJobs:
    return FailedJobs(driver, cluster.servers[0].http_url).open().live()


def test_failed_jobs_listed_with_their_tracebacks(page: FailedJobs, cluster: Cluster) -> None:
    (policy,) = policy_dead_letters(cluster, "page-orders", ["order 1"])

    def handler(job: disquette.Job) -> None:
        raise ValueError(HOSTILE)

    cluster.command(0, "ADDJOB", "page-imports", "row 1", 0)
    (worker,) = worker_dead_letters(cluster, handler, "page-imports", "dead-letters", 1)
    page.open_section()
    page.wait(lambda: {policy, worker} <= set(page.rows()), "both failed jobs")
    rows = page.rows()
    assert rows[policy]["queue"] == "page-orders-dead" and rows[policy]["origin"] == "page-orders"
    assert rows[policy]["reason"] == "queue policy"
    assert rows[worker]["reason"] == f"nacks 1 > 0: ValueError: {HOSTILE}"
    traceback = page.driver.execute_script(OPEN_FAILURE_JS, worker)
    assert traceback.startswith("Traceback") and f"ValueError: {HOSTILE}" in traceback
    assert_nothing_injected(page.driver)
    # A filter on the error's text leaves the worker's failed job.
    page.type_filter("failed-error", "BAD ROW")
    page.wait(lambda: set(page.rows()) == {worker}, "the filtered table")
    page.by_id("failed-jobs").location_once_scrolled_into_view  # noqa: B018 (the screenshot's)


def test_retry_selected_then_delete_all_with_the_buttons(
    page: FailedJobs, cluster: Cluster
) -> None:
    origin = policy_dead_letters(cluster, "page-refunds", ["refund 1", "refund 2"])
    retried, kept = sorted(origin)
    page.open_section()
    page.type_filter("failed-queue", "page-refunds")
    page.wait(lambda: set(page.rows()) == set(origin), "the two failed refunds")
    page.tick(retried)
    page.wait(lambda: page.by_id("failed-retry-selected").text == "retry 1 selected…", "1 ticked")
    page.by_id("failed-retry-selected").click()
    page.confirm()
    page.wait(lambda: redis_cli(cluster.servers[0].port, "QLEN", "page-refunds") == "1",
              "the job back on its origin queue")  # fmt: skip
    page.wait(lambda: set(page.rows()) == {kept}, "the retried job gone from the table")
    assert "1 failed job retried" in page.by_id("error").text
    page.by_id("failed-delete-all").click()
    page.confirm()
    page.wait(lambda: page.rows() == {}, "an empty table")
    page.wait(lambda: page.by_id("failed-page").text == "no failed job matches", "said so")
    assert redis_cli(cluster.servers[0].port, "QLEN", "page-refunds-dead") == "0"
