"""Configuration: one YAML file validated against the JSON Schema shipped with the package.

The schema is assembled from fragments in ``watchdog/config/schema/*.json``; each fragment is a JSON
object ``{"properties": {...}, "required": [...]?, "$defs": {...}?}`` owned by one capability, merged
into one top-level object schema (unknown top-level keys are errors). Defaults declared in the schema are
applied. :func:`load_settings` turns the validated document into frozen, typed settings
(:mod:`watchdog.config.settings`), which is all the running agent reads.
"""

from pathlib import Path

from watchdog.config.loader import ConfigError, load_config, load_config_text, schema
from watchdog.config.settings import Settings, settings_from_config

__all__ = ["ConfigError", "Settings", "load_config", "load_config_text", "load_settings", "schema"]


def load_settings(path: str | Path | None) -> Settings:
    """Load, validate and default the config file at ``path`` (None: all defaults) as typed settings."""
    return settings_from_config(load_config(path))
