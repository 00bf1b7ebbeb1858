"""The Slack channel: the notifier (``notifier``), its Block Kit rendering (``blocks``, ``incidents``,
checked by ``blockkit``), its own rows (``store``) and the buttons it receives (``approvals``).
Importing this package costs nothing: slack-sdk is imported by ``notifier`` and ``approvals`` only."""
