"""Users with queue-level permissions on real processes (docs/security.md): each rule
allowed and denied through redis-cli, redis-py and the project's client; ACL LOG;
the aclfile; a user made on one node of a three-node cluster working on the others
and surviving restarts."""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess

import pytest
import redis

from disquette.client import AuthError, Client, NoPermissionError
from tests.integration.test_http_api import ACTION, get, post
from tests.integration.test_http_port import request
from tests.support.cluster import running_cluster
from tests.support.servers import running_server, wait_for

PRODUCER = ["on", ">pp", "%W~jobs:*", "+@produce", "+@connection"]
CONSUMER = ["on", ">cc", "%R~jobs:*", "+@consume", "+@read", "+@connection"]


def cli(port: int, *args: str, user: str | None = None, password: str | None = None) -> str:
    """What redis-cli prints (errors included) for one command as ``user``."""
    command = [shutil.which("redis-cli") or "redis-cli", "-p", str(port), "--no-auth-warning"]
    if user is not None:
        command += ["--user", user, "--pass", password or ""]
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=30)
    return (result.stdout + result.stderr).strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("acl")) as s:
        admin = s.client()
        admin.execute_command("ACL", "SETUSER", "prod", *PRODUCER)
        admin.execute_command("ACL", "SETUSER", "cons", *CONSUMER)
        yield s


def as_user(server, user: str, password: str) -> redis.Redis:
    return server.client(username=user, password=password)


def test_each_rule_through_redis_cli(server):
    port = server.port
    job = cli(port, "ADDJOB", "jobs:a", "body", "0", user="prod", password="pp")
    assert job.startswith("D-")
    assert cli(port, "ADDJOB", "other", "b", "0", user="prod", password="pp") == (
        "NOPERM No permissions to access a queue"
    )
    assert cli(port, "GETJOB", "FROM", "jobs:a", user="prod", password="pp") == (
        "NOPERM User prod has no permissions to run the 'getjob' command"
    )
    assert cli(port, "ADDJOB", "jobs:a", "b", "0", user="cons", password="cc") == (
        "NOPERM User cons has no permissions to run the 'addjob' command"
    )
    got = cli(port, "GETJOB", "NOHANG", "FROM", "jobs:a", user="cons", password="cc")
    assert job in got
    assert cli(port, "SHOW", job, user="cons", password="cc").startswith("id")
    assert cli(port, "ACKJOB", job, user="cons", password="cc") == "1"
    assert "WRONGPASS" in cli(port, "PING", user="cons", password="wrong")
    assert cli(port, "ACL", "WHOAMI", user="prod", password="pp") == "prod"


HASH = "ab" * 32

RULES = [
    # (rules of user r, password, command, what redis-cli prints: a prefix)
    (["on", ">p", "+ping"], "p", ["PING"], "PONG"),
    (["on", ">p", "-@all"], "p", ["PING"], "NOPERM User r has no permissions to run the 'ping'"),
    (["off", ">p", "+ping"], "p", ["PING"], "AUTH failed: WRONGPASS"),
    (["on", "nopass", "+ping"], "anything", ["PING"], "PONG"),
    (["on", ">p", "<p", ">q", "+ping"], "p", ["PING"], "AUTH failed: WRONGPASS"),
    (["on", "#" + hashlib.sha256(b"h").hexdigest(), "+ping"], "h", ["PING"], "PONG"),
    (["on", "#" + HASH, "!" + HASH, "nopass", "+ping"], "x", ["PING"], "PONG"),
    (["on", ">p", "+@all", "-@dangerous", "~*"], "p", ["DEBUG", "SLEEP", "0"], "NOPERM"),
    (["on", ">p", "allcommands", "allqueues"], "p", ["QLEN", "any"], "0"),
    (["on", ">p", "nocommands", "+qlen", "~*"], "p", ["QSTAT", "any"], "NOPERM"),
    (["on", ">p", "+qlen", "%R~a*"], "p", ["QLEN", "abc"], "0"),
    (["on", ">p", "+qlen", "%W~a*"], "p", ["QLEN", "abc"], "NOPERM No permissions to access a q"),
    (["on", ">p", "+@produce", "%RW~a*"], "p", ["ADDJOB", "abc", "b", "0"], "D-"),
    (["on", ">p", "+@produce", "~a*", "resetqueues"], "p", ["ADDJOB", "abc", "b", "0"], "NOPERM"),
    (["on", ">p", "+acl|whoami"], "p", ["ACL", "WHOAMI"], "r"),
    (["on", ">p", "+acl|whoami"], "p", ["ACL", "USERS"],
     "NOPERM User r has no permissions to run the 'acl|users' command"),
    (["on", ">p", "+@all", "~*", "reset", "on", ">p", "+time"], "p", ["PING"], "NOPERM"),
]  # fmt: skip


@pytest.mark.parametrize(("rules", "password", "command", "printed"), RULES)
def test_each_rule_allowed_and_denied(server, rules, password, command, printed):
    admin = server.client()
    admin.execute_command("ACL", "DELUSER", "r")
    admin.execute_command("ACL", "SETUSER", "r", *rules)
    printed_out = cli(server.port, *command, user="r", password=password)
    if printed.startswith("AUTH failed"):  # (redis-cli then runs the command as default)
        assert printed in printed_out
    else:
        assert printed_out.startswith(printed) and "AUTH failed" not in printed_out


def test_read_commands_are_filtered_by_the_same_rule(server):
    admin = server.client()
    mine = admin.execute_command("ADDJOB", "jobs:f", "x", "0").decode()
    theirs = admin.execute_command("ADDJOB", "secret", "y", "0").decode()
    cons = as_user(server, "cons", "cc")
    assert cons.execute_command("SHOW", theirs) is None  # as if unknown
    assert cons.execute_command("SHOW", mine) is not None
    _cursor, ids = cons.execute_command("JSCAN", "COUNT", "1000")
    assert mine.encode() in ids and theirs.encode() not in ids
    _cursor, queues = cons.execute_command("QSCAN", "COUNT", "1000")
    assert b"jobs:f" in queues and b"secret" not in queues
    assert cons.execute_command("QLEN", "jobs:f") == 1
    for command in (["QLEN", "secret"], ["QPEEK", "secret", "1"], ["GETJOB", "FROM", "secret"]):
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a queue"):
            cons.execute_command(*command)
    for command in ("ACKJOB", "NACK", "WORKING", "FASTACK"):
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a job"):
            cons.execute_command(command, theirs)
    # A job this node does not hold: its queue is unknown here, refused without %R~*.
    unknown = "D-00000000-AAAAAAAAAAAAAAAAAAAAAAAA-05a1"
    with pytest.raises(redis.exceptions.NoPermissionError, match="access a job"):
        cons.execute_command("ACKJOB", unknown)
    assert admin.execute_command("ACKJOB", unknown) == 0  # the default user: Disque's way


def test_a_delivery_tag_needs_read_access_to_its_jobs(server):
    """A tag is a name anyone may say: GETJOB/ACKJOB/WORKING TAG by a user who may not
    read the tag's jobs is refused, and the jobs stay with their taker."""
    admin = server.client()
    theirs = admin.execute_command("ADDJOB", "secret-tagged", "y", "0").decode()
    [[_, taken, _]] = admin.execute_command(
        "GETJOB", "NOHANG", "TAG", "spark:t", "FROM", "secret-tagged"
    )
    assert taken.decode() == theirs
    cons = as_user(server, "cons", "cc")
    for command in (
        ["ACKJOB", "TAG", "spark:t"],
        ["WORKING", "TAG", "spark:t"],
        ["GETJOB", "NOHANG", "TAG", "spark:t", "FROM", "jobs:tagged"],
    ):
        with pytest.raises(redis.exceptions.NoPermissionError, match="access a job"):
            cons.execute_command(*command)
    assert admin.execute_command("SHOW", theirs) is not None  # not acknowledged
    mine = admin.execute_command("ADDJOB", "jobs:tagged", "x", "0").decode()
    [[_, got, _]] = cons.execute_command("GETJOB", "NOHANG", "TAG", "c:t", "FROM", "jobs:tagged")
    assert got.decode() == mine
    assert cons.execute_command("ACKJOB", "TAG", "c:t") == 1
    assert admin.execute_command("ACKJOB", "TAG", "spark:t") == 1


def test_the_project_client_as_a_user(server):
    with Client(f"127.0.0.1:{server.port}", username="prod", password="pp") as prod:
        job_id = prod.add_job("jobs:client", "body")
        with pytest.raises(NoPermissionError):
            prod.add_job("elsewhere", "body")
    with Client(f"127.0.0.1:{server.port}", username="cons", password="cc") as cons:
        [job] = cons.get_jobs("jobs:client", nohang=True)
        assert job.id == job_id and cons.ack(job) == 1
    with (
        pytest.raises(AuthError),
        Client(
            f"127.0.0.1:{server.port}", username="cons", password="no", connect_timeout=5
        ) as bad,
    ):
        bad.qlen("jobs:client")


def test_acl_log_records_refusals_and_failed_logins(server):
    admin = server.client()
    admin.execute_command("ACL", "LOG", "RESET")
    cons = as_user(server, "cons", "cc")
    for _ in range(3):
        with pytest.raises(redis.exceptions.NoPermissionError):
            cons.execute_command("QLEN", "private")
    with pytest.raises(redis.exceptions.AuthenticationError):
        as_user(server, "cons", "nope").ping()
    entries = admin.acl_log()
    assert [(e["reason"], e["object"], e["username"]) for e in entries[:2]] == [
        ("auth", "AUTH", "cons"),
        ("queue", "private", "cons"),
    ]
    assert entries[1]["count"] == 3 and entries[1]["context"] == "toplevel"
    assert entries[1]["client-info"]["user"] == "cons"
    assert len(admin.acl_log(count=1)) == 1
    assert admin.execute_command("ACL", "LOG", "RESET") == b"OK"
    assert admin.acl_log() == []


def test_acl_commands_speak_redis(server):
    admin = server.client()
    assert admin.acl_whoami() == "default"
    assert {"default", "prod", "cons"} <= set(admin.acl_users())
    user = admin.acl_getuser("cons")
    assert user["flags"] == ["on"] and user["keys"] == ["%R~jobs:*"]
    assert user["categories"] == ["-@all", "+@consume", "+@read", "+@connection"]
    assert b"user default on nopass ~* +@all" in admin.execute_command("ACL", "LIST")
    assert b"addjob" in admin.execute_command("ACL", "CAT", "produce")
    with pytest.raises(redis.ResponseError, match="Unknown category 'nosuch'"):
        admin.execute_command("ACL", "CAT", "nosuch")
    with pytest.raises(redis.ResponseError, match="modifier 'bogus': Syntax error"):
        admin.execute_command("ACL", "SETUSER", "x", "bogus")
    with pytest.raises(redis.ResponseError, match="'default' user cannot be removed"):
        admin.execute_command("ACL", "DELUSER", "default")
    with pytest.raises(redis.ResponseError, match="not configured to use an ACL file"):
        admin.execute_command("ACL", "SAVE")
    assert admin.acl_setuser("gone", enabled=True, nopass=True, commands=["+ping"])
    gone = as_user(server, "gone", "any")
    assert gone.ping()
    assert admin.acl_deluser("gone") == 1
    with pytest.raises(redis.ConnectionError):  # its connections are closed
        gone.ping()


def test_requirepass_is_the_default_users_password(tmp_path):
    with running_server(tmp_path, ["--requirepass", "secret"]) as s:
        assert cli(s.port, "PING") == "NOAUTH Authentication required."
        assert cli(s.port, "AUTH", "wrong") == "ERR invalid password"
        raw = s.client(password="secret")
        assert raw.ping()
        raw.execute_command("ACL", "SETUSER", "app", "on", ">apppw", "~*", "+@all")
        assert cli(s.port, "PING", user="app", password="apppw") == "PONG"
        assert cli(s.port, "PING", user="default", password="secret") == "PONG"
        # A written default record wins over requirepass: open to all, commands limited.
        raw.execute_command("ACL", "SETUSER", "default", "nopass", "-@all", "+@connection")
        assert cli(s.port, "PING") == "PONG"
        assert "NOPERM" in cli(s.port, "QLEN", "q")


def test_the_aclfile_saves_and_loads(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user seeded on >s1 %R~a* +@consume\n")
    with running_server(tmp_path, ["--aclfile", str(path)]) as s:
        admin = s.client()
        assert cli(s.port, "ACL", "WHOAMI", user="seeded", password="s1").startswith("NOPERM")
        admin.execute_command("ACL", "SETUSER", "more", "on", "nopass", "+ping")
        assert admin.execute_command("ACL", "SAVE") == b"OK"
        saved = path.read_text()
        assert "user more on nopass -@all +ping" in saved and "user seeded on #" in saved
        path.write_text("user only on nopass +time\n")
        assert admin.execute_command("ACL", "LOAD") == b"OK"
        assert set(admin.acl_users()) == {"default", "only"}
        path.write_text("user broken on +nosuch\n")
        with pytest.raises(redis.ResponseError, match=r"users\.acl:1: Error in ACL SETUSER"):
            admin.execute_command("ACL", "LOAD")
        assert set(admin.acl_users()) == {"default", "only"}  # nothing applied


def test_a_bad_aclfile_stops_the_start(tmp_path):
    path = tmp_path / "users.acl"
    path.write_text("user x on +nosuch\n")
    server = running_server(tmp_path, ["--aclfile", str(path)])
    with pytest.raises(AssertionError, match="ACL errors"), server:
        pass


def test_users_are_cluster_wide_and_survive_restarts(tmp_path):
    with running_cluster(tmp_path, 3) as cluster:
        cluster.clients[0].execute_command("ACL", "SETUSER", "prod", *PRODUCER)
        for server in cluster.servers:
            wait_for(lambda s=server: cli(s.port, "PING", user="prod", password="pp") == "PONG",
                     what="the user on every node")  # fmt: skip
        port = cluster.servers[2].port
        job = cli(port, "ADDJOB", "jobs:x", "b", "0", user="prod", password="pp")
        assert job.startswith("D-")
        cluster.clients[1].execute_command("ACL", "SETUSER", "prod", "%W~other")
        wait_for(lambda: cli(port, "ADDJOB", "other", "b", "0", user="prod",
                             password="pp").startswith("D-"), what="the change")  # fmt: skip
        for i in range(3):
            cluster.kill(i)
        cluster.restart(2)  # alone: what it knows comes from its nodes.conf
        alone = ("REPLICATE", "1")
        assert cli(port, "ADDJOB", "other", "b", "0", *alone, user="prod",
                   password="pp").startswith("D-")  # fmt: skip
        assert cli(port, "ADDJOB", "nope", "b", "0", *alone, user="prod",
                   password="pp").startswith("NOPERM")  # fmt: skip


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def test_the_http_port_acts_as_the_user_across_the_cluster(tmp_path):
    with running_cluster(tmp_path, 2, http=True) as cluster:
        admin = cluster.clients[0]
        admin.execute_command("ACL", "SETUSER", "cons", *CONSUMER)
        admin.execute_command("ACL", "SETUSER", "prod", *PRODUCER)
        secret = admin.execute_command("ADDJOB", "secret", "body", "0").decode()
        one = ("REPLICATE", "1")
        mine = cluster.clients[1].execute_command("ADDJOB", "jobs:h", "b", "0", *one).decode()
        url = cluster.servers[0].http_url
        wait_for(lambda: cli(cluster.servers[1].port, "PING", user="cons",
                             password="cc") == "PONG", what="the user on node 1")  # fmt: skip
        assert get(url + "/api/queues", basic("cons", "wrong"))[0] == 401
        status, page = get(url + "/api/queues", basic("cons", "cc"))
        assert status == 200 and page["unanswered"] == []
        assert [q["name"] for q in page["queues"]] == ["jobs:h"]  # node 1's, not secret
        assert get(url + f"/api/jobs/{mine}", basic("cons", "cc"))[0] == 200
        assert get(url + f"/api/jobs/{secret}", basic("cons", "cc"))[0] == 404
        assert get(url + f"/api/jobs/{secret}")[0] == 200  # (default: every permission)
        status, refused = post(url + "/api/queues/secret/jobs", {"body": "x"},
                               {**ACTION, **basic("prod", "pp")})  # fmt: skip
        assert status == 400 and refused["error"].startswith("NOPERM")
        status, added = post(url + "/api/queues/jobs:new/jobs", {"body": "x"},
                             {**ACTION, **basic("prod", "pp")})  # fmt: skip
        assert status == 200 and added["id"].startswith("D-")
        assert get(url + "/metrics", basic("cons", "cc"))[0] == 403
        assert request(url + "/metrics")[0] == 200
