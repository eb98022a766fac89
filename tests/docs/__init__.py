"""The documentation, run: every example of README.md and docs/*.md."""
