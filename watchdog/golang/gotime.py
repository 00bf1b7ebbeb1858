"""Go's ``time.Time`` as Prometheus' templates see it: UTC, millisecond precision, ``Time.String``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class GoTime:
    """A ``*time.Time`` in UTC with millisecond precision; prints like Go's ``Time.String``."""

    GO_TYPE = "*time.Time"

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def go_string(self) -> str:
        seconds, millis = divmod(self.ms, 1000)
        try:
            stamp = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(seconds=seconds)
            text = stamp.strftime("%Y-%m-%d %H:%M:%S")
            year = stamp.year
        except OverflowError:
            return f"<time {self.ms}ms>"
        if year < 1000:
            text = f"{year:04d}" + text[len(str(year)):]
        if millis:
            text += "." + f"{millis:03d}".rstrip("0")
        return text + " +0000 UTC"
