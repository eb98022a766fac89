"""``disquette.dramatiq.DisqueBroker``: Dramatiq on disquette (docs/dramatiq.md).

The broker and the results backend live in
:mod:`disquette.integrations.dramatiq_broker`; this module is the short import
path a Dramatiq app names (``dramatiq.set_broker(DisqueBroker(url=...))``).
"""

from disquette.integrations.dramatiq_broker import DisqueBroker, DisqueResultBackend

__all__ = ["DisqueBroker", "DisqueResultBackend"]
