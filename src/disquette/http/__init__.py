"""The operator's HTTP port: the JSON API, /metrics and the dashboard (a third shell)."""
