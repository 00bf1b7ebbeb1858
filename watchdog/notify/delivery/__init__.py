"""How every notification is delivered once, whichever channel: the notifier contract (``base``), the
durable outbox, one delivery worker per notifier and the alert state the dispatcher persists. Nothing
here names a channel."""
