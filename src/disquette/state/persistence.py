"""What commands and INFO see of the AOF: a control interface and a status record.

The append-only file belongs to the process (``disquette.server.aof``), but
BGREWRITEAOF, DEBUG LOADAOF and INFO persistence are commands. They reach it
through :attr:`ServerState.aof <disquette.state.server.ServerState.aof>`,
typed as :class:`AofControl`; a state without one (the simulator, unit tests)
behaves as a server whose AOF is off and idle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

#: Results of :meth:`AofControl.bgrewriteaof`.
REWRITE_STARTED = "started"
REWRITE_IN_PROGRESS = "in-progress"
REWRITE_FAILED = "failed"


@dataclass
class AofStatus:
    """The values behind INFO persistence (reference 5.3), beside ``loading`` and
    ``aof_last_write_status``, which come from the node and the server state."""

    state: str = "off"  # off | on | wait-rewrite
    rewrite_in_progress: bool = False
    rewrite_scheduled: bool = False
    last_rewrite_time_sec: int = -1
    current_rewrite_time_sec: int = -1
    last_bgrewrite_ok: bool = True
    current_size: int = 0
    base_size: int = 0
    buffer_length: int = 0
    rewrite_buffer_length: int = 0
    pending_bio_fsync: int = 0
    delayed_fsync: int = 0
    loading_start_time: int = 0
    loading_total_bytes: int = 0
    loading_loaded_bytes: int = 0


class AofControl(Protocol):
    def status(self) -> AofStatus:
        """The current INFO persistence values."""

    def bgrewriteaof(self) -> str:
        """Start a background rewrite: REWRITE_STARTED, REWRITE_IN_PROGRESS or REWRITE_FAILED."""

    def loadaof(self) -> bool:
        """DEBUG LOADAOF: flush the AOF, empty the node, load the file again; False
        when there was nothing to load."""
