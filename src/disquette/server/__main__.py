"""``python -m disquette.server``: the same as the ``disquette-server`` script."""

from disquette.server.main import main

main()
