"""Evidence sanity at the edge: a printed value that is an error text is missing evidence, never a value.

Tools print their failures where the value would go, so a parser that keeps values "exactly as
printed" also keeps the failures. The snapshot builder asks `error_text` about every value it takes
into the snapshot (and `version_problem` about versions) and records a rejected one as None with the
cause, so an error string can never become a driver version, a serial or a firmware version, and the
same error on both sides of a comparison can never read as "unchanged".

What counts as an error text (each seen in real output; sources in tests/fixtures/*/PROVENANCE.md):
- amd-smi library status strings, `AMDSMI_STATUS_<CODE> - <text>` (ROCm/amdsmi py-interface
  amdsmi_exception.py `set_err_info`), e.g. `"amdgpu_version": "AMDSMI_STATUS_FILE_ERROR - Error
  opening file"` when amd-smi runs without access to the render devices;
- permission banners (`Permission denied`, amd-smi's `User is missing the following required groups`);
- U+FFFD replacement characters: bytes that were not UTF-8 (a broken probe, never a real name);
- `Error ...`, `Failed ...`, `Unable to ...`, `Cannot ...` messages, and `N/A`-style placeholders;
- control characters (NUL, ESC) inside a value.
A version must also look like one: amd-smi 26.x with an inbox kernel driver prints /proc/version with
every space removed as the amdgpu version (`Linuxversion6.17.0(ubuntu@ubuntu)(gcc...`, ROCm/ROCm
issue #5536), which is the kernel, not a driver release.
"""

from __future__ import annotations

import re

REPLACEMENT = "\ufffd"

_AMDSMI_STATUS_RE = re.compile(r"\bAMDSMI_STATUS_(?P<code>[A-Z_]+)\b(?:\s*-\s*(?P<text>.*))?")
_PERMISSION_RE = re.compile(
    r"permission denied|operation not permitted|access denied|missing the following required groups|"
    r"requires? root|must be root|insufficient permission",
    re.IGNORECASE,
)
_ERROR_RE = re.compile(
    r"^(?:error|err:|failed|failure|unable to|cannot|can't|could not|no such file|not found|timeout|timed out)\b",
    re.IGNORECASE,
)
_PLACEHOLDERS = frozenset(
    {"n/a", "na", "none", "null", "unknown", "unsupported", "not supported", "not available", "-"}
)
_SHELL_RE = re.compile(r"\bcommand not found\b|\bno such file or directory\b", re.IGNORECASE)
"""A shell's words for a tool it could not run, wherever they stand (`bash: amd-smi: command not found`)."""
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_PROC_VERSION_RE = re.compile(r"^Linux\s*version", re.IGNORECASE)
_VERSION_RE = re.compile(r"^v?\d+(?:\.\d+)+(?:[-+~_.][0-9A-Za-z][0-9A-Za-z._+~-]*)?$")

# What an amd-smi status means for the evidence, in words a person can act on.
_AMDSMI_CAUSES = {
    "FILE_ERROR": "amd-smi could not open a device file: it ran without access to /dev/dri/renderD* "
    "(not in the render group) or the driver does not provide the file",
    "NO_PERM": "amd-smi ran without permission for /dev/dri/renderD* (not root, not in the render group)",
    "NOT_SUPPORTED": "amd-smi says the query is not supported on this device",
    "DRIVER_NOT_LOADED": "amd-smi found no loaded amdgpu driver",
    "NOT_INIT": "amd-smi could not initialise its library",
    "INIT_ERROR": "amd-smi could not initialise its library",
}


def error_text(value: str | None) -> str | None:
    """Why `value` is an error text rather than a value, or None when it is an ordinary value."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return "empty value"
    if REPLACEMENT in text:
        return f"value holds bytes that are not UTF-8 ({text!r}): a broken probe, not a real value"
    if _CONTROL_RE.search(text):
        return f"value holds control characters ({text!r}): a broken probe, not a real value"
    status = _AMDSMI_STATUS_RE.search(text)
    if status is not None:
        cause = _AMDSMI_CAUSES.get(status.group("code"), "amd-smi reported a library error")
        return f"{cause} (printed {text!r})"
    if _PERMISSION_RE.search(text):
        return f"permission banner instead of a value ({text!r})"
    if _ERROR_RE.match(text) or _SHELL_RE.search(text):
        return f"error message instead of a value ({text!r})"
    if text.strip("[]() ").lower() in _PLACEHOLDERS:
        return f"the tool printed {text!r}"  # nvidia-smi and rocm-smi bracket theirs: "[Not Supported]", "[N/A]"
    return None


def version_problem(value: str | None) -> str | None:
    """Why `value` is not a usable version string (error text, /proc/version, not version-shaped)."""
    bad = error_text(value)
    if bad is not None or value is None:
        return bad
    text = value.strip()
    if _PROC_VERSION_RE.match(text):
        return (
            f"amd-smi printed /proc/version instead of an amdgpu module version ({text[:60]!r}...): "
            "an inbox kernel driver has no module version"
        )
    if not _VERSION_RE.match(text):
        return f"not a version string ({text[:60]!r})"
    return None


def name_problem(value: str) -> str | None:
    """Why a device or interface name cannot be trusted (undecodable bytes, control characters, blanks)."""
    if REPLACEMENT in value:
        return f"name {value!r} holds bytes that are not UTF-8: a broken probe, not a new device"
    if _CONTROL_RE.search(value) or not value.strip() or any(ch.isspace() for ch in value):
        return f"name {value!r} holds control characters or blanks: a broken probe, not a new device"
    return None


__all__ = ["REPLACEMENT", "error_text", "name_problem", "version_problem"]
