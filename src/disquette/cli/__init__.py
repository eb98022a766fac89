"""Command-line tools: ``disquette`` (subcommands, see :mod:`.main`) and ``disquette-cli``."""
