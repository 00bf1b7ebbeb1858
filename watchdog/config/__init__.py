"""Configuration: one YAML file validated against the JSON Schema shipped with the package.

The schema is assembled from fragments in ``watchdog/config/schema/*.json``; each fragment is a JSON
object ``{"properties": {...}, "required": [...]?, "$defs": {...}?}`` owned by one capability, merged
into one top-level object schema (unknown top-level keys are errors). Defaults declared in the schema are
applied, so code reads ``config["engines"]`` without guessing.
"""

from watchdog.config.loader import ConfigError, load_config, load_config_text, schema

__all__ = ["ConfigError", "load_config", "load_config_text", "schema"]
