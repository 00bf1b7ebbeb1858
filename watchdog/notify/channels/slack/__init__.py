"""The Slack channel: the notifier (``notifier``), its Block Kit rendering (``blocks``, ``incidents``;
the tests check it against Slack's limits with ``tests/support/blockkit.py``), its own rows (``store``)
and the buttons it receives (``approvals``).
Importing this package costs nothing: slack-sdk is imported by ``notifier`` and ``approvals`` only."""
