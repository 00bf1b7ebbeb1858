"""``python -m watchdog``: the same as the ``inference-watchdog`` command."""

from watchdog.cli import main

raise SystemExit(main())
