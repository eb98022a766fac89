"""What a node shows of itself: INFO's text, ``/metrics``, the dashboard's views and the
cluster's answers gathered; it reads the server state (:mod:`disquette.state`), never
the commands."""
