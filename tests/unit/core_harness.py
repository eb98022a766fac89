"""A node on a virtual clock, with a recording client, for unit tests of the core."""

from __future__ import annotations

import random
from dataclasses import dataclass

from disquette.core.client import Client
from disquette.core.node import Node

NODE_ID = b"0123456789abcdef0123456789abcdef01234567"


@dataclass
class Settings:
    maxmemory: int = 1 << 30
    maxmemory_policy: str = "acks"
    hz: int = 10
    cluster_node_timeout: int = 15000
    replica_repair: bool = True
    replica_repair_delay: int = 0
    result_ttl: int = 3600


class Clock:
    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now = start_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


class RecordingClient(Client):
    __slots__ = ("replies",)

    def __init__(self, client_id: int = 1) -> None:
        super().__init__(client_id, b"127.0.0.1:1", 0)
        self.replies: list[bytes] = []

    def deliver(self, reply: bytes) -> None:
        self.replies.append(reply)

    def push(self, data: bytes) -> None:
        self.replies.append(data)


class Harness:
    def __init__(self, seed: int = 1, **settings) -> None:
        self.clock = Clock()
        rng = random.Random(seed)
        self.settings = Settings(**settings)
        self.node = Node(self.settings, NODE_ID, self.clock, rng, rng.randbytes)

    def run_for(self, ms: int, step: int = 10) -> None:
        """Advance virtual time, running the job timer and cron as the server would."""
        end = self.clock.now + ms
        last_cron = self.clock.now
        while self.clock.now < end:
            self.clock.advance(step)
            self.node.process_jobs()
            if self.clock.now - last_cron >= 100:
                self.node.cron()
                last_cron = self.clock.now
            self.node.serve_blocked_clients()
