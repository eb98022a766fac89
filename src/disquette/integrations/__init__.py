"""Shells that let other job frameworks run on a disquette cluster unchanged.

Each module adapts one framework's broker or result-store interface to the
project's client (:mod:`disquette.client`) and nothing else: like the worker and
the Spark connector, an integration reaches the cluster only through the client
protocol, never the core or the server (shared/DESIGN.md, "Adapters stay on the
client side"). The framework itself is an optional extra: importing a module
here needs it installed (``pip install 'disquette[celery]'`` or
``'disquette[dramatiq]'``).

- :mod:`.kombu_transport`: a Kombu transport (``disque://``), Celery's broker;
- :mod:`.celery_backend`: a Celery result backend (``disque://``);
- :mod:`.dramatiq_broker`: a Dramatiq broker and results backend.
"""
