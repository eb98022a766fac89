"""The pieces of the Celery and Dramatiq integrations that need no server: ``disque://``
URLs, delays against TTLs, ETAs, and the start-up hook that registers the transport."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from disquette.integrations.delays import MAX_TTL, delay_and_ttl, needs_working_now
from disquette.integrations.kombu_transport import eta_delay
from disquette.integrations.url import ClusterURL


def test_urls_name_seeds_and_credentials():
    assert ClusterURL.parse("disque://a:7711,b:7712/") == ClusterURL(("a:7711", "b:7712"))
    assert ClusterURL.parse("disque://:s%40cret@a") == ClusterURL(("a",), None, "s@cret")
    assert ClusterURL.parse("disque://ann:pw@a:1") == ClusterURL(("a:1",), "ann", "pw")
    assert ClusterURL.parse("a:1,b:2").seeds == ("a:1", "b:2")
    backend = "disquette.integrations.celery_backend:DisqueBackend://h:7711"
    assert ClusterURL.parse(backend).seeds == ("h:7711",)  # Celery's class-path form
    assert ClusterURL.parse("disque://ann:pw@a,b").display() == "disque://ann:**@a,b"
    assert ClusterURL.parse("disque://:pw@a").display(True) == "disque://:pw@a"


@pytest.mark.parametrize("url", ["redis://h:6379", "disque://", "disque:///", "amqp://x@"])
def test_bad_urls_say_what_is_expected(url):
    with pytest.raises(ValueError, match=r"disque://\[\[user\]:password@\]host"):
        ClusterURL.parse(url)


@given(st.integers(-10, 10 * MAX_TTL), st.integers(1, 10 * MAX_TTL))
def test_a_delay_is_always_shorter_than_the_ttl_an_id_carries(delay, ttl):
    d, t = delay_and_ttl(delay, ttl)
    assert d >= 0 and 0 < t <= max(ttl, MAX_TTL)
    if d:
        assert d < t <= MAX_TTL
        assert d == delay or t == MAX_TTL  # cut only past the longest TTL
    if 0 < delay < MAX_TTL // 2 and ttl < MAX_TTL // 2:
        assert (d, t) == (delay, delay + ttl)  # the job lives its whole TTL once due


def test_eta_rounds_down_and_past_etas_are_due():
    now = datetime(2030, 1, 1, tzinfo=UTC)
    later = (now + timedelta(seconds=7.9)).isoformat()
    assert eta_delay(later, now.timestamp()) == 7
    assert eta_delay((now - timedelta(hours=1)).isoformat(), now.timestamp()) == 0
    assert eta_delay(None, now.timestamp()) == 0
    naive = (now + timedelta(seconds=3)).replace(tzinfo=None).isoformat()
    assert eta_delay(naive, now.timestamp()) == 3  # naive ETAs are UTC, as Celery sends them


def test_the_start_up_hook_registers_the_transport_when_kombu_is_imported():
    code = (
        "import _disquette_kombu, sys; _disquette_kombu.install(); "
        "assert 'kombu' not in sys.modules; "
        "import kombu.transport as t; print(t.TRANSPORT_ALIASES['disque'], "
        "t.resolve_transport('disquette').__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["disquette.integrations.kombu_transport:Transport", "Transport"]


def test_a_job_fetched_late_in_its_retry_period_gets_working_at_once():
    now = 1000.0
    assert not needs_working_now(now - 10, 300, now, redelivered=False)  # fresh
    assert needs_working_now(now - 100, 300, now, redelivered=False)  # waited > retry/4
    assert needs_working_now(now - 1, 300, now, redelivered=True)  # last queueing unknown
    assert needs_working_now(None, 300, now, redelivered=False)
    assert not needs_working_now(None, 0, now, redelivered=True)  # at most once: no requeue
