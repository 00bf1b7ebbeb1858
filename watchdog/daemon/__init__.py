"""The long-lived process around the agent: exporter + tick scheduler (:mod:`serve`), the monotonic tick loop
(:mod:`scheduler`) and systemd's sd_notify (:mod:`sdnotify`, :mod:`systemd_hooks`)."""
