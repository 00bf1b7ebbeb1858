"""The notifiers, each of the :class:`~watchdog.notify.delivery.base.Notifier` shape and registered by name
in :mod:`watchdog.notify.registry`: ``log``, ``alertmanager`` and ``slack`` (its own package)."""
