"""Cluster bus message types and flags (reference section 11).

The core names the messages it sends with these numbers; the bus shell frames
them. Their semantics are Disque's; the wire format is disquette's own.
"""

from __future__ import annotations

PING = 0
PONG = 1
MEET = 2
FAIL = 3
REPLJOB = 4
GOTJOB = 5
ENQUEUE = 6
QUEUED = 7
SETACK = 8
WILLQUEUE = 9
GOTACK = 10
DELJOB = 11
NEEDJOBS = 12
YOURJOBS = 13
WORKING = 14
PAUSE = 15

# Message flags.
NOREPLY = 1
INCR_NACKS = 2
INCR_DELIV = 4
