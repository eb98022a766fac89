"""``disque://`` URLs: how a broker or backend setting names a cluster.

``disque://[[user]:password@]host[:port][,host[:port]...][/]`` lists the seed
nodes the client tries in random order (the port defaults to 7711), with an
optional password (an ACL user's when a user name is given); Kombu, Celery and
Dramatiq settings hold one string, so the whole cluster fits in it. The scheme
may also be a class path (Celery's ``module:Class://`` form for backends). Any
other scheme, or an empty host list, is refused with a message that shows the
expected form.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from disquette.client import Client

SCHEMES = ("disque", "disquette")
FORM = "disque://[[user]:password@]host[:port][,host[:port]...]"


@dataclass(frozen=True)
class ClusterURL:
    """The seeds and credentials a ``disque://`` URL names."""

    seeds: tuple[str, ...]
    username: str | None = None
    password: str | None = None

    @classmethod
    def parse(cls, url: str) -> ClusterURL:
        scheme, sep, rest = url.partition("://")
        if not sep:
            scheme, rest = "disque", url
        if scheme.lower() not in SCHEMES and not any(c in scheme for c in ".:"):
            raise ValueError(f"not a disque URL: {url!r} (expected {FORM})")
        username = password = None
        if "@" in rest:
            auth, rest = rest.rsplit("@", 1)
            user, colon, secret = auth.partition(":")
            if colon:
                username, password = unquote(user) or None, unquote(secret)
            else:
                password = unquote(user)
        rest = rest.split("/", 1)[0].split("?", 1)[0]
        seeds = tuple(s.strip() for s in rest.split(",") if s.strip())
        if not seeds:
            raise ValueError(f"no node in {url!r} (expected {FORM})")
        return cls(seeds, username, password)

    def display(self, include_password: bool = False, mask: str = "**") -> str:
        """The URL back, its password masked unless asked for (Kombu's banner, logs)."""
        auth = ""
        if self.password is not None:
            secret = self.password if include_password else mask
            auth = f"{self.username or ''}:{secret}@"
        return f"disque://{auth}{','.join(self.seeds)}"

    def client(self, **options: Any) -> Client:
        """A client for the cluster; ``options`` are :class:`disquette.Client`'s."""
        return Client(list(self.seeds), username=self.username, password=self.password, **options)
