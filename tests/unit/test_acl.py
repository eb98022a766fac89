"""Users and rules (core/acl.py): the rule parser, the checks, records from peers or
files never trusted, and two or three cores converging on the in-memory bus."""

from __future__ import annotations

import hashlib
import re

import msgpack
import pytest

from disquette.commands.table import build_table
from disquette.core import acl
from disquette.core import messages as msg
from disquette.core.acl import READ, RW, WRITE, AclError, User, apply_rules, decode, describe
from disquette.protocol.frames import decode_frame, encode_frame
from tests.unit.test_cluster_jobs import Cluster


def user(*rules: str) -> User:
    return apply_rules(User(b"u"), [r.encode() for r in rules])


def test_a_new_user_may_do_nothing_and_reset_goes_back_there():
    fresh = User(b"u")
    assert describe(fresh) == b"user u off -@all"
    assert not fresh.may_run("ping", None) and fresh.access(b"q") == 0
    full = user("on", "nopass", "allqueues", "allcommands")
    assert full.full and describe(full) == b"user u on nopass ~* +@all"
    assert describe(apply_rules(full, [b"reset"])) == describe(fresh)


def test_command_rules_categories_and_subcommands():
    u = user("+@consume", "-nack", "+acl|whoami", "+@read", "-show")
    assert u.may_run("getjob", None) and u.may_run("ackjob", None)
    assert not u.may_run("nack", None) and not u.may_run("show", None)
    assert u.may_run("acl", "whoami") and not u.may_run("acl", "setuser")
    assert not u.may_run("addjob", None)
    v = user("+@all", "-@dangerous", "+config", "-config|set")
    assert v.may_run("config", "get") and not v.may_run("config", "set")
    assert not v.may_run("debug", "error") and v.may_run("addjob", None)
    # A later rule on the same target replaces the earlier one.
    assert user("+addjob", "-addjob", "+addjob").commands == ("-@all", "+addjob")


def test_queue_patterns_give_read_and_write_separately():
    u = user("%R~jobs:*", "%W~out", "~both", "%RW~rw*")
    assert u.access(b"jobs:1") == READ and u.access(b"out") == WRITE
    assert u.access(b"both") == RW and u.access(b"rwx") == RW and u.access(b"x") == 0
    assert not u.everywhere(READ) and user("%R~*").everywhere(READ)
    assert user("~a", "allqueues").queues == ((RW, b"*"),)
    assert user("~a", "resetqueues").queues == ()


def test_passwords_are_stored_hashed_and_checked():
    u = user("on", ">secret", "#" + hashlib.sha256(b"other").hexdigest())
    assert b"secret" not in describe(u)
    assert u.check_password(b"secret") and u.check_password(b"other")
    assert not u.check_password(b"nope")
    assert not apply_rules(u, [b"off"]).check_password(b"secret")
    assert not apply_rules(u, [b"<secret"]).check_password(b"secret")
    assert apply_rules(u, [b"nopass"]).check_password(b"anything")
    assert apply_rules(u, [b"nopass", b">p"]).nopass is False


@pytest.mark.parametrize(
    ("rule", "reason"),
    [
        ("bogus", "Syntax error"),
        ("+nosuch", "Unknown command or category name in ACL"),
        ("+@nosuch", "Unknown command or category name in ACL"),
        ("+addjob|x", "Unknown command or category name in ACL"),
        ("#abc", "The password hash must be exactly 64 characters"),
        ("<never", "The password you are trying to remove from the user does not exist"),
        ("%X~q", "Syntax error"),
        ("~", "Queue patterns must be"),
    ],
)
def test_bad_rules_say_which_and_why(rule: str, reason: str):
    text = re.escape(f"Error in ACL SETUSER modifier '{rule}': {reason}")
    with pytest.raises(AclError, match=text):
        user(rule)


def test_every_command_is_in_a_category():
    names = {cmd.name for cmd in build_table().values()}
    assert names == acl.ALL_COMMANDS


def test_records_round_trip_and_garbage_is_refused():
    u = user("on", ">p", "%R~a*", "~b", "+@produce", "-cancel").copy(7, b"a" * 40)
    back = decode(u.encode())
    assert back is not None and describe(back) == describe(u) and back.counter == 7
    bad = [
        b"\xc1",
        msgpack.packb((b"u",)),
        msgpack.packb((b"u", True, False, (), ("+nosuch",), [], 1, b"a" * 40, False)),
        msgpack.packb((b"u", True, False, (b"xyz",), ("-@all",), [], 1, b"a" * 40, False)),
        msgpack.packb((b"u", True, False, (), ("-@all",), [9, b"q"], 1, b"a" * 40, False)),
        msgpack.packb((b"a b", True, False, (), ("-@all",), [], 1, b"a" * 40, False)),
        msgpack.packb((b"u", True, False, (), ("+addjob",), [], 1, b"a" * 40, False)),
    ]
    assert [decode(b) for b in bad] == [None] * len(bad)


def test_the_default_user_follows_requirepass_until_written():
    c = Cluster(2)
    table = c.nodes[0].acl
    assert table.user(b"default", None).nopass
    with_password = table.user(b"default", b"pw")
    assert not with_password.nopass and with_password.check_password(b"pw")
    table.set_user(b"default", [b">other"], b"pw")
    written = table.user(b"default", None)
    assert written.check_password(b"pw") and written.check_password(b"other")
    assert table.users() == [b"default"]


def test_a_user_reaches_every_node_and_frames_carry_it():
    c = Cluster(3)
    c.nodes[1].acl.set_user(b"alice", [b"on", b">pw", b"%R~q*", b"+@consume"], None)
    c.pump()
    lines = {describe(n.acl.user(b"alice", None)) for n in c.nodes}
    assert len(lines) == 1
    sent = [m for _src, _dst, m in c.net.sent if m[0] == msg.ACLUSERS]
    _header, messages = decode_frame(
        encode_frame(c.nodes[1].cluster.header(), sent)[4:], c.nodes[1].dialect.codec
    )
    assert [m[0] for m in messages] == [msg.ACLUSERS] * len(sent)


def test_writes_on_both_sides_of_a_partition_converge_after_it():
    c = Cluster(3)
    c.net.cut.add(c.nodes[2].myself)
    c.nodes[0].acl.set_user(b"a", [b"on", b"+ping"], None)
    c.nodes[2].acl.set_user(b"a", [b"on", b"+time"], None)  # same counter: greater ID wins
    c.nodes[2].acl.set_user(b"b", [b"on"], None)
    c.nodes[0].acl.set_user(b"b", [b"off"], None)
    c.nodes[0].acl.delete(b"b")
    c.pump()
    c.net.cut.clear()
    c.run(5000)  # digests go to a random peer each second
    tables = [{n: describe(u) for n, u in node.acl.records.items()} for node in c.nodes]
    assert tables[0] == tables[1] == tables[2]
    assert c.nodes[0].acl.user(b"a", None).may_run("time", None)
    assert c.nodes[1].acl.user(b"b", None) is None  # the later deletion wins


def test_acl_load_replaces_every_user():
    c = Cluster(2)
    table = c.nodes[0].acl
    table.set_user(b"old", [b"on"], None)
    table.replace([user("on", "+ping")])
    c.pump()
    assert c.nodes[1].acl.users() == [b"default", b"u"]
