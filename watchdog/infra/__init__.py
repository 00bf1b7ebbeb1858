"""Process-wide infrastructure every stage may use: logging with secret redaction, secrets, shipped asset
paths, the SQLite state database and YAML source lines for error messages."""
