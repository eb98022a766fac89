"""What the AOF tests ask a server over a raw connection: INFO fields, and every job ID
once the AOF has been loaded (shared by the persistence and crash tests)."""

from __future__ import annotations

from tests.support.raw import RawConnection
from tests.support.servers import ServerProcess, wait_for


def info(conn: RawConnection, section: str = "persistence") -> dict[str, str]:
    text = conn.command(b"INFO", section).decode()
    return dict(line.split(":", 1) for line in text.split("\r\n") if ":" in line)


def job_ids(conn: RawConnection) -> set[bytes]:
    """Every job ID, once the AOF is loaded."""
    wait_for(lambda: info(conn)["loading"] == "0", 60, what="loading")
    cursor, ids = conn.command(b"JSCAN", b"0", b"BUSYLOOP", b"COUNT", b"1000")
    assert cursor == b"0"
    return set(ids)


def kill_once_written(srv: ServerProcess, conn: RawConnection) -> None:
    """Kill the node (SIGKILL) once its AOF buffer is written: with appendfsync everysec
    a write waits, up to two seconds (as in Disque), while a background fsync runs, and
    a kill then loses it by design."""
    wait_for(lambda: info(conn)["aof_buffer_length"] == "0", 10, what="AOF buffer written")
    srv.proc.kill()
    srv.proc.wait()
