"""The dashboard's Workflows section in a real browser against a real three-node cluster.

A finished group and a running chord (delayed members, its callback waiting) sent with
the task API show up once the section is opened, with their kind, name (hostile, so
shown as text), progress and state; opening the chord shows its jobs and their states;
*cancel…* and the confirmation cancel it, and the panel says so. The test leaves its
screenshot in ``test-artifacts/`` (conftest.py).
"""

from __future__ import annotations

import threading

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from disquette.tasks import App
from disquette.tasks.workflow import chord, group
from tests.browser.test_dashboard import Dashboard, assert_nothing_injected
from tests.support.cluster import Cluster
from tests.support.servers import wait_for

HOSTILE = "<img src=x onerror=alert(1)> album"
# The rows of the workflows' table as the page shows them, read in one script.
WORKFLOWS_JS = """return Array.from(document.querySelectorAll('#workflows-list tbody tr'),
  r => ({id: r.dataset.key, kind: r.cells[1].textContent, name: r.cells[2].textContent,
         progress: r.cells[3].textContent, counts: r.cells[4].textContent,
         state: r.cells[5].textContent}));"""
JOBS_JS = """return Array.from(document.querySelectorAll('#workflow-jobs tbody tr'),
  r => ({role: r.cells[1].textContent, task: r.cells[2].textContent,
         state: r.cells[3].textContent}));"""


class Workflows(Dashboard):
    """The dashboard's Workflows section."""

    def open_section(self) -> Workflows:
        self.driver.find_element(By.CSS_SELECTOR, "#workflows > summary").click()
        self.wait(lambda: self.by_id("workflows-page").text, "the first reading")
        return self

    def rows(self) -> dict[str, dict[str, str]]:
        return {row["id"]: row for row in self.driver.execute_script(WORKFLOWS_JS)}

    def open_workflow(self, workflow_id: str) -> None:
        self.driver.find_element(
            By.CSS_SELECTOR, f'#workflows-list tr[data-key="{workflow_id}"] a.workflow-link'
        ).click()
        self.wait(lambda: self.by_id("workflow-id").text == workflow_id, "the detail panel")

    def jobs(self) -> list[dict[str, str]]:
        return list(self.driver.execute_script(JOBS_JS))


def test_workflows_progress_detail_and_cancel(driver: WebDriver, cluster: Cluster) -> None:
    app = App(cluster.addresses[0])

    @app.task(queue="page-workflows", name="square")
    def square(x: int) -> int:
        return x * x

    @app.task(queue="page-workflows", name="later", delay=3600)
    def later(x: int) -> int:
        return x

    worker = app.worker(poll_timeout=0.1)
    thread = threading.Thread(target=worker.run, kwargs={"install_signal_handlers": False})
    thread.start()
    try:
        done = group((square.s(i) for i in range(3)), name="squares").send()
        wait_for(lambda: done.state().state == "succeeded", 60, 0.05, "the group to finish")
        running = chord((later.s(i) for i in range(3)), square.s(), name=HOSTILE).send()
        page = Workflows(driver, cluster.servers[0].http_url).open().live().open_section()
        page.wait(lambda: {done.id, running.id} <= set(page.rows()), "both workflows")
        rows = page.rows()
        assert rows[done.id]["kind"] == "group" and rows[done.id]["name"] == "squares"
        assert rows[done.id]["progress"] == "100 %" and rows[done.id]["state"] == "succeeded"
        assert rows[done.id]["counts"] == "3 succeeded (of 3)"
        assert rows[running.id]["name"] == HOSTILE and rows[running.id]["progress"] == "0 %"
        assert rows[running.id]["counts"] == "1 waiting, 3 active (of 4)"
        assert rows[running.id]["state"] == "running"
        page.open_workflow(running.id)
        page.wait(lambda: len(page.jobs()) == 4, "its four jobs")
        assert page.jobs()[-1] == {"role": "callback", "task": "square", "state": "waiting"}
        assert page.by_id("workflow-state").text == "running · 0 %"
        assert_nothing_injected(page.driver)
        page.by_id("workflow-cancel").click()
        page.confirm()
        page.wait(lambda: page.by_id("workflow-state").text.startswith("cancelled"), "cancelled")
        assert {job["state"] for job in page.jobs()[:3]} == {"cancelled"}
        assert "cancelled" in page.by_id("error").text
        page.by_id("workflow-detail").location_once_scrolled_into_view  # noqa: B018 (the screenshot's)
    finally:
        worker.stop(hurry=True)
        thread.join(30)
        app.client.close()
