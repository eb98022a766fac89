"""``/metrics`` against real servers: what redis-cli does shows in a scrape parsed by
Prometheus's own parser, with the right types; hostile queue names come out escaped
and parse back; the password guards it as every HTTP route; a cluster's bus and
membership show; and the Grafana dashboard and the alert rules in docs/ ask only for
metrics a real scrape has (the rules checked and tested by promtool)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from disquette.observe.merge import name_text
from disquette.observe.metrics import CONTENT_TYPE
from tests.support.cluster import running_cluster
from tests.support.servers import redis_cli, running_server, wait_for

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "disquette.json"
ALERTS = Path(__file__).resolve().parents[2] / "docs" / "prometheus" / "alerts.yml"

Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def families(base_url: str, headers: dict[str, str] | None = None) -> dict:
    status, response_headers, body = get(base_url + "/metrics", headers)
    assert status == 200, body
    assert response_headers["Content-Type"] == CONTENT_TYPE
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def samples(base_url: str, headers: dict[str, str] | None = None) -> Samples:
    out: Samples = {}
    for family in families(base_url, headers).values():
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def by(samples: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(labels)[label]: value for labels, value in samples.get(name, {}).items()}


def test_a_scrape_follows_what_redis_cli_does(tmp_path):
    with running_server(tmp_path, http=True) as server:
        port = server.port
        ids = [redis_cli(port, "ADDJOB", "jobs", f"body{i}", "0") for i in range(3)]
        redis_cli(port, "ADDJOB", "other", "x", "0")
        assert redis_cli(port, "GETJOB", "FROM", "jobs").split("\n")[1] == ids[0]
        assert redis_cli(port, "NACK", ids[0]) == "1"
        got = redis_cli(port, "GETJOB", "COUNT", "2", "FROM", "jobs").split("\n")
        assert redis_cli(port, "ACKJOB", got[1]) == "1"
        assert redis_cli(port, "PAUSE", "other", "in") == "in"
        assert redis_cli(port, "ADDJOB", "other", "y", "0").startswith("PAUSED")
        redis_cli(port, "NOSUCH")

        s = samples(server.http_url)
        assert by(s, "disquette_queue_jobs", "queue") == {"jobs": 1, "other": 1}
        assert by(s, "disquette_queue_jobs_in_total", "queue") == {"jobs": 4, "other": 1}
        assert by(s, "disquette_queue_jobs_out_total", "queue") == {"jobs": 3, "other": 0}
        assert by(s, "disquette_queue_nacks_total", "queue") == {"jobs": 1, "other": 0}
        assert by(s, "disquette_queue_additional_deliveries_total", "queue")["jobs"] == 0
        assert by(s, "disquette_queue_paused", "queue") == {"jobs": 0, "other": 1}
        assert by(s, "disquette_jobs", "state") == {"queued": 2, "active": 1, "acked": 0}
        commands = by(s, "disquette_commands_total", "command")
        assert commands["addjob"] == 5 and commands["getjob"] == 2 and commands["nack"] == 1
        assert by(s, "disquette_errors_total", "type") == {"PAUSED": 1, "ERR": 1}
        assert s["disquette_commands_processed_total"][()] == sum(commands.values())
        assert s["disquette_queues"][()] == 2
        assert s["disquette_uptime_seconds"][()] > 0
        assert s["disquette_event_loop_lag_seconds"][()] >= 0
        assert s["disquette_memory_used_bytes"][()] > 0
        assert s["disquette_memory_max_bytes"][()] > 0
        assert s["disquette_aof_enabled"][()] == 0


def test_types_follow_prometheus_conventions(tmp_path):
    with running_server(tmp_path, http=True) as server:
        redis_cli(server.port, "ADDJOB", "q", "x", "0")
        found = families(server.http_url)
    expected = {
        "disquette_queue_jobs": "gauge",
        "disquette_queue_jobs_in": "counter",
        "disquette_queue_nacks": "counter",
        "disquette_queue_oldest_job_age_seconds": "gauge",
        "disquette_commands": "counter",
        "disquette_errors": "counter",
        "disquette_memory_used_bytes": "gauge",
        "disquette_bus_frames_sent": "counter",
        "disquette_repair_jobs_repaired": "counter",
        "disquette_repair_backlog": "gauge",
        "disquette_event_loop_lag_seconds": "gauge",
        "disquette_jobs": "gauge",
    }
    assert {name: found[name].type for name in expected} == expected
    for family in found.values():
        assert family.name.startswith("disquette_") and family.documentation
        suffix = "_total" if family.type == "counter" else ""
        assert all(sample.name == family.name + suffix for sample in family.samples)


def test_hostile_queue_names_are_escaped_and_parse_back(tmp_path):
    names = [b'say "hi"', b"back\\slash\\", b"two\nlines", b"\xff\xfe\x00", b"\r\n# TYPE x"]
    with running_server(tmp_path, http=True) as server:
        client = redis.Redis(port=server.port, protocol=2)
        for name in names:
            client.execute_command("ADDJOB", name, b"body", 0)
        _, _, body = get(server.http_url + "/metrics")
        s = samples(server.http_url)
    assert by(s, "disquette_queue_jobs", "queue") == {name_text(n): 1 for n in names}
    assert b'queue="say \\"hi\\""' in body and b'queue="two\\nlines"' in body
    assert b'queue="~b64~' + base64.urlsafe_b64encode(b"\xff\xfe\x00") + b'"' in body
    assert not re.search(rb"^# TYPE x", body, re.M)  # a name cannot forge a line


def test_the_password_guards_metrics(tmp_path):
    with running_server(tmp_path, http=True, args=["--requirepass", "s3cret"]) as server:
        url = server.http_url + "/metrics"
        status, headers, body = get(url)
        assert status == 401 and headers["WWW-Authenticate"] == 'Basic realm="disquette"'
        assert b"disquette_" not in body
        wrong = base64.b64encode(b"prometheus:nope").decode()
        assert get(url, {"Authorization": f"Basic {wrong}"})[0] == 401
        basic = base64.b64encode(b"default:s3cret").decode()
        assert samples(server.http_url, {"Authorization": f"Basic {basic}"})
        s = samples(server.http_url, {"Authorization": "Bearer s3cret"})
        assert s["disquette_connected_clients"][()] == 0
        # A scraper's own ACL user (docs/security.md): INFO is what /metrics needs.
        admin = server.client(password="s3cret")
        admin.execute_command("ACL", "SETUSER", "prometheus", "on", ">scrape", "+info")
        admin.execute_command("ACL", "SETUSER", "blind", "on", ">blind", "+ping")
        admin.close()
        scraper = base64.b64encode(b"prometheus:scrape").decode()
        assert samples(server.http_url, {"Authorization": f"Basic {scraper}"})
        blind = base64.b64encode(b"blind:blind").decode()
        assert get(url, {"Authorization": f"Basic {blind}"})[0] == 403


def test_a_cluster_shows_its_bus_and_nodes(tmp_path):
    with running_cluster(tmp_path, 2, http=True) as cluster:
        job = cluster.command(0, "ADDJOB", "q", "x", 0, "REPLICATE", 2)
        url = cluster.servers[1].http_url

        def replicated() -> Samples | None:
            s = samples(url)
            return s if by(s, "disquette_jobs", "state").get("active") == 1 else None

        s = wait_for(replicated, what="the replica in node 1's metrics")
        assert by(s, "disquette_cluster_nodes", "state")["ok"] == 2
        for name in ("messages_sent", "messages_received", "frames_sent", "frames_received"):
            assert s[f"disquette_bus_{name}_total"][()] > 0, name
        assert s["disquette_bus_received_bytes_total"][()] > 0
        assert s["disquette_cluster_data_generation"][()] > 0
        cluster.command(0, "ACKJOB", job)
        wait_for(lambda: by(samples(url), "disquette_jobs", "state")["active"] == 0,
                 what="the ack collected on node 1")  # fmt: skip


def dashboard_metric_names() -> set[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]
    exprs += [
        v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        for v in dashboard["templating"]["list"]
        if v["type"] == "query"
    ]
    assert exprs
    return {name for expr in exprs for name in re.findall(r"\bdisquette_[a-z_]+", expr)}


def scraped_names(tmp_path: Path) -> set[str]:
    """The metric names of a real scrape (of a node with a queue and an error counted)."""
    with running_server(tmp_path, http=True) as server:
        redis_cli(server.port, "ADDJOB", "q", "x", "0")
        redis_cli(server.port, "NOSUCH")  # (a family with no sample does not parse)
        return {s.name for f in families(server.http_url).values() for s in f.samples}


def test_the_grafana_dashboard_asks_only_for_scraped_metrics(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    assert any(v["type"] == "datasource" for v in dashboard["templating"]["list"])
    names = dashboard_metric_names()
    assert names - scraped_names(tmp_path) == set()


def promtool(*args: str) -> str:
    """promtool (Debian's prometheus package, which make tools installs) in docs/prometheus."""
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is missing: run `make tools` (Debian's prometheus package)")
    done = subprocess.run([tool, *args], cwd=ALERTS.parent, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_alert_rules_load_pass_their_tests_and_ask_for_scraped_metrics(tmp_path):
    """docs/prometheus/alerts.yml: valid rules (promtool check rules), each alert firing
    as its tests say (promtool test rules alerts.test.yml), on metrics a real scrape has
    (with the label values they select)."""
    assert "SUCCESS: 13 rules found" in promtool("check", "rules", ALERTS.name)
    assert "SUCCESS" in promtool("test", "rules", "alerts.test.yml")
    rules = ALERTS.read_text()
    names = set(re.findall(r"\bdisquette_[a-z_]+", rules))
    assert len(names) >= 10 and names - scraped_names(tmp_path) == set()
    states = set(re.findall(r'state="(\w+)"', rules))
    assert states <= {"ok", "pfail", "fail", "leaving"}  # disquette_cluster_nodes' states
