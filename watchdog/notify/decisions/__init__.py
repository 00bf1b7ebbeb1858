"""What to notify, decided without I/O on the delivery path: transitions against the persisted state,
grouping by cause, incidents (cause and symptoms), muting by silences and inhibit rules."""
