"""The messages nvidia-smi prints instead of its output, for every nvidia-smi parser to refuse by name.

nvidia-smi writes these to stdout with exit status 6, 9 or 255 (so a bundle that kept stdout only still
holds them); each is a known form, refused with `ParseError` naming it, never read as a value:
- "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the
  latest NVIDIA driver is installed and running." (no kernel module loaded: the issue's first example);
- "No devices were found" (driver loaded, no GPU bound to it);
- "Failed to initialize NVML: Driver/library version mismatch" (user-space NVML newer than the loaded
  kernel module: the classic half-done driver upgrade) and "Failed to initialize NVML: Unknown Error"
  (a container without the device nodes);
- "Unable to determine the device handle for GPU<bdf>: ..." (one GPU lost: "GPU is lost. Reboot the
  system to recover this GPU", or "Unknown Error") printed before the rest of the output.
"""

from __future__ import annotations

import re

from upgrade_gate.errors import ParseError

_MESSAGES = (
    (re.compile(r"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"),
     "nvidia-smi could not communicate with the NVIDIA driver (no kernel module loaded)"),
    (re.compile(r"^No devices were found\b"), "nvidia-smi found no devices"),
    (re.compile(r"^Failed to initialize NVML: Driver/library version mismatch"),
     "NVML driver/library version mismatch: the loaded kernel module is not the installed driver"),
    (re.compile(r"^Failed to initialize NVML\b"), "nvidia-smi could not initialise NVML"),
    (re.compile(r"^Unable to determine the device handle for GPU"), "nvidia-smi lost a GPU (no device handle)"),
)  # fmt: skip


def refuse_messages(lines: list[str], tool: str) -> None:
    """ParseError at the first line holding one of nvidia-smi's failure messages (see the module docstring)."""
    for no, line in enumerate(lines, 1):
        stripped = line.strip()
        for regex, meaning in _MESSAGES:
            if regex.search(stripped):
                raise ParseError(tool, no, stripped, meaning)
