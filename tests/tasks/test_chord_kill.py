"""A chord of 10,000 members over three real nodes, the node that took them killed
mid-run and started again empty (issue 39's proof): the callback runs once, with every
member's result.

Each node has an app and a worker on threads; the apps know every node, so a worker
whose node died goes on with another. The members carry a short RETRY: those queued or
running on the killed node come back from their copies elsewhere. The callback is
counted where it runs; the test waits until no node holds it any longer (acknowledged
everywhere: it cannot run again) before it counts.
"""

from __future__ import annotations

import threading

import pytest

from disquette.tasks import App
from disquette.tasks.workflow import chord
from tests.support.cluster import running_cluster
from tests.support.servers import wait_for

SIZE = 10_000
KILLED = 0  # the node the producer adds the chord to
DEADLINE = 600  # seconds for any one condition: ten thousand jobs on a loaded machine


class Counts:
    """Members run, and the callback's runs, from any worker thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.members = 0
        self.callbacks: list[int] = []

    def member(self) -> None:
        with self.lock:
            self.members += 1

    def callback(self, total: int) -> None:
        with self.lock:
            self.callbacks.append(total)


# Ten to fifteen seconds on an idle machine; one loaded CI run passed pytest's default
# 300 s still waiting for the callback (which reads its 10,000 parents' results one
# WAITJOB at a time: a node started again empty asks the others for each).
@pytest.mark.timeout(3 * DEADLINE)
def test_a_chord_of_ten_thousand_calls_back_once_through_a_node_killed(tmp_path, running):
    counts = Counts()
    with running_cluster(tmp_path, 3) as cluster:
        seeds = cluster.addresses
        apps = []
        for i in range(3):
            app = App([seeds[i], *seeds[:i], *seeds[i + 1 :]])

            @app.task(queue="chord-kill", name="member", retry=5)
            def member(x: int) -> int:
                counts.member()
                return x

            @app.task(queue="chord-kill", name="total", retry=5)
            def total(results: list[int]) -> int:
                counts.callback(sum(results))
                return sum(results)

            apps.append(app)
        tasks = apps[KILLED].tasks
        handle = chord((tasks["member"].s(i) for i in range(SIZE)), tasks["total"].s()).send()
        for app in apps:  # started once the chord is sent: the kill comes mid-run
            running(app)
        callback = handle.steps[-1].encode()
        wait_for(lambda: counts.members >= SIZE // 4, DEADLINE, 0.05, "a quarter run")
        cluster.kill(KILLED)
        wait_for(lambda: counts.members >= SIZE // 2, DEADLINE, 0.05, "half of them run")
        cluster.restart(KILLED)
        cluster.wait_meshed()
        expected = SIZE * (SIZE - 1) // 2
        assert apps[1].client.wait(handle.last, timeout=DEADLINE) is not None
        wait_for(lambda: cluster.acked_or_gone(callback, range(3)), DEADLINE, 0.1,
                 "the callback acknowledged on every node")  # fmt: skip
        assert counts.callbacks == [expected]
        assert handle.result(timeout=DEADLINE) == expected
