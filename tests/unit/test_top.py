"""``disquette top``'s picture from snapshots given by hand (the shapes of
/api/cluster and /api/queues): rates from counter deltas, queues by rate, the
screen cut to the terminal, hostile names escaped. tests/integration/test_top.py
runs it in a terminal against a real cluster."""

from __future__ import annotations

from disquette.cli.top import (
    BAD,
    HEADER,
    OK,
    WARN,
    Rates,
    Snapshot,
    age,
    by_rate,
    printable,
    render,
)


def node(node_id: str, state: str = "ok", jobs: int | None = 3) -> dict:
    answered = jobs is not None
    return {
        "id": node_id * 40,
        "addr": "127.0.0.1:7711",
        "state": state,
        "jobs": jobs,
        "queued": jobs,
        "queues": 2 if answered else None,
        "memory": {"used": 2 << 20, "max": 8 << 20, "level": 0.25} if answered else None,
        "clients": 4 if answered else None,
        "ops_per_sec": 12 if answered else None,
        "repair_backlog": 0 if answered else None,
    }


def queue(name: str, length: int, jobs_in: int, jobs_out: int, paused: str = "none") -> dict:
    return {
        "name": name,
        "len": length,
        "nodes": {"a" * 40: length},
        "jobs_in": jobs_in,
        "jobs_out": jobs_out,
        "nacks": 0,
        "additional_deliveries": 0,
        "paused": paused,
        "age": 3,
        "blocked": 0,
    }


def snap(taken: float, queues: list[dict], nodes: list[dict] | None = None) -> Snapshot:
    return Snapshot(taken, "127.0.0.1:7711", nodes or [node("a"), node("b")], queues)


def test_rates_are_deltas_between_snapshots():
    rates = Rates()
    rates.update(snap(10.0, [queue("slow", 100, 50, 50), queue("fast", 1, 0, 0)]))
    assert rates.of("fast") is None  # one snapshot: no rate yet
    rates.update(snap(12.0, [queue("slow", 100, 52, 50), queue("fast", 1, 400, 398)]))
    assert rates.of("fast") == (200.0, 199.0) and rates.of("slow") == (1.0, 0.0)
    # A node that did not answer lowers the sums: no negative rate.
    rates.update(snap(13.0, [queue("slow", 50, 30, 30), queue("fast", 1, 400, 398)]))
    assert rates.of("slow") == (0.0, 0.0)


def test_queues_by_rate_then_length():
    rates = Rates()
    queues = [queue("idle-long", 900, 0, 0), queue("busy", 1, 0, 0), queue("idle", 5, 0, 0)]
    rates.update(snap(0.0, queues))
    rates.update(
        snap(1.0, [queue("idle-long", 900, 0, 0), queue("busy", 1, 9, 9), queue("idle", 5, 0, 0)])
    )
    assert [q["name"] for q in by_rate(queues, rates)] == ["busy", "idle-long", "idle"]


def test_the_screen_shows_nodes_and_queues_with_their_states():
    rates = Rates()
    nodes = [node("a"), node("b", "pfail", None), node("c", "fail", None)]
    rates.update(snap(0.0, [queue("orders", 7, 0, 0)], nodes))
    picture = snap(1.0, [queue("orders", 7, 5, 0), queue("held", 2, 0, 0, "in")], nodes)
    rates.update(picture)
    lines = render(picture, rates, 120, 40, 1.0)
    text = "\n".join(t for t, _ in lines)
    assert "3 nodes (2 not ok), 2 queues" in text
    styles = {t.split()[0]: s for t, s in lines if t}
    assert styles["aaaaaaaa"] == OK and styles["bbbbbbbb"] == WARN and styles["cccccccc"] == BAD
    assert styles["NODE"] == HEADER and styles["QUEUE"] == HEADER and styles["held"] == WARN
    orders = next(t for t, _ in lines if t.startswith("orders"))
    assert orders.split()[:4] == ["orders", "7", "5.0", "0.0"]
    assert orders.split()[6] == "3s"  # the AGE column says its unit
    assert "2.0M 25%" in next(t for t, _ in lines if t.startswith("aaaaaaaa"))


def test_the_screen_fits_the_terminal():
    queues = [queue(f"q{i:03d}-" + "x" * 100, i, i, i) for i in range(200)]
    rates = Rates()
    rates.update(snap(0.0, queues))
    lines = render(snap(1.0, queues), rates, 60, 15, 1.0)
    assert len(lines) == 15 and all(len(t) <= 60 for t, _ in lines)
    assert len(render(snap(1.0, queues), rates, 60, 4, 1.0)) == 4  # no room for queues


def test_hostile_names_are_escaped():
    assert printable("a\x1b[31mb\n") == "a\\x1b[31mb\\n"
    rates = Rates()
    picture = snap(0.0, [queue("\x1b]0;owned\x07", 1, 0, 0)])
    rates.update(picture)
    assert not any("\x1b" in t or "\x07" in t for t, _ in render(picture, rates, 120, 40, 1.0))


def test_an_unreachable_cluster_says_so():
    lines = render(Snapshot(0.0, error="127.0.0.1:1: refused\x1b"), Rates(), 80, 24, 1.0)
    assert lines[-1] == ("127.0.0.1:1: refused\\x1b", BAD)


def test_ages_carry_their_unit():
    assert [age(s) for s in (None, 0, 45, 60, 750, 3600, 11_520, 86_400, 183_600)] == [
        "-", "0s", "45s", "1m00s", "12m30s", "1h0m", "3h12m", "1d0h", "2d3h"
    ]  # fmt: skip
