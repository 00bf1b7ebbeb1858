"""inference-watchdog: per-node agent for GPU LLM inference hosts."""

__version__ = "0.1.0"
