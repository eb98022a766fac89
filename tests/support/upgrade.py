"""Rolling upgrades of a real cluster under load: from the previous release, or to the next.

The proof of issue 34, with real processes. ``size`` nodes of release *before* form
a cluster (REPLICATE 3 jobs; each node with or without AOF, as the caller says: the
short form mixes both in one cluster); every node has a producer and
a consumer of its own, a schedule adds a job every second and a queue policy sets
the RETRY of some queues, both set before the first step. Then each node in turn
is stopped (SHUTDOWN and kill -9 in alternation) and started again in its
directory, on its port, as release *after* (and, with ``back``, node 0 is then put
back on release *before*, which must read the files *after* wrote); the next step
waits until it links with every other node (how long that took is measured from the
moment it answers PING) and, without AOF, until the copies it lost are made again
elsewhere (its new data generation tells its peers, core/repair.py). After the last step the load
stops, the queue drains, and :class:`Report` says what the clients saw.

Releases (:class:`Release`) are environments for the same interpreter:

* the previous one, built from the git history: ``git archive 48ade79 src`` into
  a folder of the test's own, run as ``python -m disquette.server`` with that
  folder first on ``PYTHONPATH`` and ``DISQUETTE_PURE=1`` (its dependencies are
  this one's). A clone without that commit fails with a message saying so.
* this one, as the tests run every server;
* the next one, rehearsed: this release with ``DISQUETTE_BUS_REHEARSAL`` making it
  announce a newer bus protocol and a feature more, and probe its peers with a
  message type no release knows and a VERSION with one element too many
  (core/dialect.py), which this release must skip and count, never close a link on.

Every wait is a condition with a deadline. The integration test runs the short
form (tests/integration/test_upgrade.py); ``bench/upgrade.py`` the long one and
prints the targets' table.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from tests.support.raw import RawConnection, encode
from tests.support.rolling import DEADLINE, Ledger, RollingCluster
from tests.support.servers import wait_for

#: The previous release: disquette 0.1.0, whose bus and files carry no version.
PREVIOUS_COMMIT = "48ade79"
REPO = Path(__file__).resolve().parents[2]
QUEUE = "upgrade"
TICKS = "upgrade-ticks"
#: The schedule's period (s). A tick is due until the next one: with four seconds each
#: rank of three nodes gets its own second (core/cron.py's STEP_MAX) and the first one
#: a second attempt, so a node of a loaded machine (the tests run side by side on two
#: cores) can stall through a restart of its peer without the tick being skipped, as
#: docs/queues.md says a late tick is. (With two, one tick in about sixty was skipped
#: in some of the full suite's runs, never alone.)
TICK_EVERY = 4
POLICY_RETRY = 77  # the policy's RETRY for queues pol-*
CRON_COUNTERS = ("cron_ticks_fired", "cron_fire_errors", "cron_ticks_skipped")
RESTART_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


@dataclass(frozen=True)
class Release:
    """A release the cluster runs: its name, the environment of its servers, and the
    bus protocol it announces (1: none, the previous release)."""

    name: str
    env: dict[str, str]
    protocol: int


def previous_release(folder: Path) -> Release:
    """disquette 0.1.0 from the git history, unpacked in ``folder`` (AssertionError with
    the reason when the clone does not hold it)."""
    probe = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{PREVIOUS_COMMIT}^{{commit}}"],
        capture_output=True,
    )
    if probe.returncode != 0:
        raise AssertionError(
            f"the previous release, commit {PREVIOUS_COMMIT} (disquette 0.1.0), is not in this "
            f"clone ({REPO}): the rolling-upgrade test builds it from the git history; fetch "
            "it (git fetch --unshallow) and run the test again"
        )
    folder.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_COMMIT, "src"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    return Release("0.1.0", {"PYTHONPATH": str(folder / "src"), "DISQUETTE_PURE": "1"}, 1)


def this_release() -> Release:
    from disquette import __version__
    from disquette.core.dialect import PROTOCOL

    return Release(__version__, {}, PROTOCOL)


def next_release() -> Release:
    """This release rehearsing the next one's bus (core/dialect.py, ``rehearsal``)."""
    from disquette.core.dialect import PROTOCOL, REHEARSAL_VARIABLE

    version = PROTOCOL + 1
    spec = f"version={version},release=next-rehearsal,add=rehearsal,probe"
    return Release("next-rehearsal", {REHEARSAL_VARIABLE: spec}, version)


@dataclass
class Step:
    """One node replaced: how it was stopped and how long it took to link again."""

    node: int
    how: str
    release: str = ""  # the one it was started as
    link_s: float = 0.0
    policy_ok: bool = False
    versions: list[str] = field(default_factory=list)  # the new node's CLUSTER NODES fields
    total_s: float = 0.0  # stop to next step, repairs included
    stop_s: float = 0.0  # from the stop to the process gone
    start_s: float = 0.0  # from its start to answering PING


@dataclass
class Report:
    """What one rolling upgrade did, as the clients and the nodes saw it."""

    before: str
    after: str
    aof: list[bool]  # each node's
    ledger: Ledger = field(default_factory=Ledger)
    steps: list[Step] = field(default_factory=list)
    reconnects: int = 0  # errors of clients of a node while it was being replaced
    errors: list[str] = field(default_factory=list)  # any other client error
    ticks: dict[int, int] = field(default_factory=dict)  # schedule tick -> jobs seen
    window: tuple[int, int] = (0, 0)  # the ticks that had to fire, inclusive
    frames_rejected: int = 0  # over the nodes at the end (links closed on a frame)
    skipped_seen: int = 0  # messages of a newer peer skipped, seen at a mixed step
    #: Each node's schedule counters at the end (INFO extensions: ticks fired, attempts
    #: failed, ticks given up), what a missed tick's message shows.
    cron: list[dict[str, int]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def duplicates_pct(self) -> float:
        added = len(self.ledger.added)
        return 100.0 * self.ledger.duplicates / added if added else 0.0

    @property
    def due(self) -> range:
        """The ticks that had to fire."""
        first, last = self.window
        return range(first + -first % TICK_EVERY, last + 1, TICK_EVERY)

    @property
    def ticks_missed(self) -> list[int]:
        return [t for t in self.due if not self.ticks.get(t)]

    @property
    def ticks_doubled(self) -> list[int]:
        return sorted(t for t, n in self.ticks.items() if n > 1)

    def rows(self) -> list[tuple[str, str]]:
        """The targets' table: what was measured, and the target."""
        worst = max((s.link_s for s in self.steps), default=0.0)
        dups = f"{self.ledger.duplicates} ({self.duplicates_pct:.2f} %)"
        ticks = f"{len(self.ticks_missed)} / {len(self.ticks_doubled)}"
        policy = "yes" if all(s.policy_ok for s in self.steps) else "no"
        return [
            ("acknowledged ADDJOBs", f"{len(self.ledger.added)}"),
            ("lost (target 0)", f"{len(self.ledger.lost)}"),
            ("duplicates (target <= 1 %)", dups),
            ("client errors but reconnects (target 0)", f"{len(self.errors)}"),
            ("reconnects to the node replaced", f"{self.reconnects}"),
            ("slowest step linked in (target <= 5 s)", f"{worst:.2f} s"),
            (f"schedule ticks ({len(self.due)}) missed / doubled", ticks),
            ("policy applied after every step", policy),
            ("bus frames rejected (links closed)", f"{self.frames_rejected}"),
        ]  # fmt: skip


class Upgrade:
    """The cluster, its load and the steps of one rolling upgrade."""

    def __init__(
        self,
        base: Path,
        before: Release,
        after: Release,
        *,
        aof: bool | list[bool],
        size: int = 5,
        timeout_ms: int = 2000,
        rate: float = 20.0,
        back: bool = False,
        pause: float = 0.0,
    ) -> None:
        self.before = before
        self.after = after
        self.running = [before] * size  # the release each node runs
        self.rate = rate  # ADDJOBs a second, per producer
        self.back = back  # after the last step, node 0 back to the first release
        self.pause = pause  # seconds of load between steps (the long form's)
        self.cluster = RollingCluster(base, size, timeout_ms, True, aof=aof, env=before.env)
        self.report = Report(before.name, after.name, self.cluster.aof)
        self.replacing: set[int] = set()  # nodes being stopped or not linked again yet
        self.stop_adding = threading.Event()
        self.stop_consuming = threading.Event()
        self.threads: list[threading.Thread] = []

    # The clients --------------------------------------------------------------------

    def _failed(self, i: int, error: Exception) -> None:
        """A client of node ``i`` got ``error``: a reconnect while the node is replaced
        (its -LOADING too), an error otherwise."""
        report = self.report
        with report.lock:
            restarting = i in self.replacing or i in self.cluster.down
            if restarting and (isinstance(error, RESTART_ERRORS) or "LOADING" in str(error)):
                report.reconnects += 1
            else:
                report.errors.append(f"node {i}: {type(error).__name__}: {error}")

    def _produce(self, i: int) -> None:
        ledger = self.report.ledger
        sent = 0
        client = None
        while not self.stop_adding.is_set():
            sent += 1
            try:
                client = client or self.cluster.client(i)
                jid = client.execute_command(
                    "ADDJOB", QUEUE, b"job-%d-%d" % (i, sent), 5000, "REPLICATE", 3, "RETRY", 5
                )
                with ledger.lock:
                    ledger.added.add(jid)
            except redis.RedisError as e:
                client = None
                self._failed(i, e)
                time.sleep(0.1)
            time.sleep(1 / self.rate)

    def _consume(self, i: int, stop: threading.Event) -> None:
        ledger = self.report.ledger
        client = None
        while not stop.is_set():
            try:
                client = client or self.cluster.client(i)
                got = client.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 10, "FROM", QUEUE)
                ids = [jid for _queue, jid, _body in got or ()]
                with ledger.lock:
                    for jid in ids:
                        ledger.deliveries[jid] = ledger.deliveries.get(jid, 0) + 1
                if ids:
                    client.execute_command("ACKJOB", *ids)
            except redis.RedisError as e:
                client = None
                self._failed(i, e)
                time.sleep(0.1)

    def _watch_ticks(self) -> None:
        """The schedule's jobs, from whichever node is up: the tick each was added for."""
        rng = random.Random(3)
        ticks = self.report.ticks
        while not self.stop_consuming.is_set():
            i = rng.choice(self.cluster.live())
            try:
                with self.cluster.client(i) as c:
                    got = c.execute_command("GETJOB", "TIMEOUT", 200, "COUNT", 10, "FROM", TICKS)
                    for _queue, jid, _body in got or ():
                        show = c.execute_command("SHOW", jid)
                        fields = dict(zip(show[::2], show[1::2], strict=True)) if show else {}
                        key = fields.get(b"dedup", b"")
                        if key.startswith(b"cron:upgrade:"):
                            tick = int(key.rsplit(b":", 1)[1])
                            with self.report.lock:
                                ticks[tick] = ticks.get(tick, 0) + 1
                        c.execute_command("ACKJOB", jid)
            except redis.RedisError:
                time.sleep(0.05)  # the node is being replaced: another one next time

    # The steps ------------------------------------------------------------------------

    def run(self) -> Report:
        cluster = self.cluster
        size = len(cluster.servers)
        report = self.report
        try:
            cluster.start()
            with cluster.client(0) as c:
                c.execute_command("QPOLICY", "SET", "upgrade", "pol-*", "retry", POLICY_RETRY)
                c.execute_command(
                    "CRON",
                    "SET",
                    "upgrade",
                    TICKS,
                    "tick",
                    "EVERY",
                    TICK_EVERY,
                    "REPLICATE",
                    2,
                    "RETRY",
                    5,
                )
            wait_for(self._schedule_everywhere, DEADLINE, interval=0.1, what="the schedule")
            # A node holds back the ticks of its first seconds with a schedule (it may
            # hear that another fired them): the window starts after those.
            first_tick = int(time.time()) + 3
            self.threads = [
                *(threading.Thread(target=self._produce, args=(i,)) for i in range(size)),
                *(
                    threading.Thread(target=self._consume, args=(i, self.stop_consuming))
                    for i in range(size)
                ),
                threading.Thread(target=self._watch_ticks),
            ]
            for t in self.threads:
                t.start()
            time.sleep(2)  # load before the first step
            for i in range(size):
                time.sleep(self.pause)
                self._replace(i, "SHUTDOWN" if i % 2 == 0 else "kill -9", self.after)
            if self.back:  # and one node back: the previous release reads the new files
                self._replace(0, "SHUTDOWN", self.before)
            time.sleep(2)  # load after the last step
            last_tick = int(time.time()) - 3
            report.window = (first_tick, last_tick)
            self._finish()
            return report
        finally:
            self.stop_adding.set()
            self.stop_consuming.set()
            for t in self.threads:
                t.join()
            cluster.stop()

    def _replace(self, i: int, how: str, release: Release) -> None:
        """Stop node ``i`` (SHUTDOWN or kill -9), start it as the new release, wait until
        it links with every node (timed) and, without AOF, its lost copies are repaired."""
        cluster = self.cluster
        others = [j for j in range(len(cluster.servers)) if j != i]
        step = Step(i, how, release.name)
        begun = time.monotonic()
        with self.report.lock:
            self.replacing.add(i)
        generations = {j: cluster.counter(j, "cluster_generation_changes") for j in others}
        if how == "SHUTDOWN":
            with cluster.lock:
                cluster.down.add(i)
            server = cluster.servers[i]
            with RawConnection(server.port) as conn:  # (a client that never retries)
                conn.send(encode("SHUTDOWN"))
                assert conn.closed_by_server(DEADLINE), f"node {i} still up after SHUTDOWN"
            server.proc.wait(DEADLINE)
            server.stop()
        else:
            cluster.kill(i)
        step.stop_s = time.monotonic() - begun
        cluster.restart(i, release.env)
        self.running[i] = release
        started = time.monotonic()
        step.start_s = started - begun - step.stop_s
        cluster.wait_meshed()
        if release.protocol >= 2:
            step.versions = self._wait_versions(i)
        step.link_s = time.monotonic() - started
        if not cluster.aof[i]:
            wait_for(
                lambda: all(
                    cluster.counter(j, "cluster_generation_changes") > generations[j]
                    for j in others
                ),
                DEADLINE,
                interval=0.1,
                what=f"node {i}'s new generation seen",
            )
            cluster.wait_repaired(list(range(len(cluster.servers))), f"repairs after node {i}")
        with self.report.lock:
            self.replacing.discard(i)
        if not self.report.steps and 2 <= self.before.protocol < release.protocol:
            self._wait_skipped(others)
        step.policy_ok = self._policy_applies()
        step.total_s = time.monotonic() - begun
        self.report.steps.append(step)

    def _wait_versions(self, i: int) -> list[str]:
        """Until node ``i`` (the new release) knows what every peer speaks: its CLUSTER
        NODES fields after Disque's, by port."""
        cluster = self.cluster
        expected = dict(enumerate(self.running))

        def known() -> bool:
            with cluster.client(i) as c:
                text = c.execute_command("CLUSTER", "NODES").decode()
            lines = {line.split()[1]: line for line in text.splitlines()}
            for j, release in expected.items():
                line = lines.get(f"127.0.0.1:{cluster.servers[j].port}", "")
                if j != i and f"bus={release.protocol}" not in line.split()[6:]:
                    return []
            return [" ".join(lines[k].split()[6:]) for k in sorted(lines)]

        return wait_for(
            known, DEADLINE, interval=0.05, what=f"node {i} knowing its peers' versions"
        )

    def _wait_skipped(self, olds: list[int]) -> None:
        """A mixed step of the rehearsal: the older nodes skip the newer one's probes."""

        def skipped() -> int:
            return sum(
                cluster.counter(j, "cluster_bus_messages_skipped")
                + cluster.counter(j, "cluster_bus_fields_trimmed")
                for j in olds
            )

        cluster = self.cluster
        self.report.skipped_seen = wait_for(skipped, DEADLINE, interval=0.1, what="probes skipped")

    def _schedule_everywhere(self) -> bool:
        """Every node holds the schedule (CRON GET answers it)."""
        for j in self.cluster.live():
            with self.cluster.client(j) as c:
                if not c.execute_command("CRON", "GET", "upgrade"):
                    return False
        return True

    def _policy_applies(self) -> bool:
        """The policy set before the upgrade gives every node's new jobs its RETRY."""
        ok = True
        for j in self.cluster.live():
            with self.cluster.client(j) as c:
                jid = c.execute_command("ADDJOB", f"pol-{j}", "p", 0, "REPLICATE", 1)
                show = c.execute_command("SHOW", jid)
                fields = dict(zip(show[::2], show[1::2], strict=True))
                ok &= fields[b"retry"] == POLICY_RETRY
                c.execute_command("DELJOB", jid)
        return ok

    def _finish(self) -> None:
        """Stop adding, drain the queue, and read the nodes' bus counters."""
        report = self.report
        ledger = report.ledger
        self.stop_adding.set()
        for t in self.threads[: len(self.cluster.servers)]:
            t.join()
        try:
            wait_for(
                lambda: not ledger.lost and not report.ticks_missed,
                DEADLINE,
                interval=0.2,
                what="the drain",
            )
        except AssertionError:
            pass  # reported through ledger.lost and ticks_missed
        for j in range(len(self.cluster.servers)):
            with self.cluster.client(j) as c:
                info = c.info("extensions")
            report.cron.append({k: int(info.get(k, -1)) for k in CRON_COUNTERS})
        report.frames_rejected = sum(
            self.cluster.counter(j, "cluster_bus_frames_rejected")
            for j in range(len(self.cluster.servers))
        )
