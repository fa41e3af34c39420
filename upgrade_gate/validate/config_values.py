"""Typed readers for the values of CVF's `cluster-validation-config` ConfigMap (pure, no I/O).

ConfigMap data values are strings (`"100"`, `"1K"`, `"false"`); a YAML file written by hand may hold
plain YAML scalars instead (`100`, `false`), so every reader accepts both. Each reader raises
`ConfigError` naming the key and the source file; nothing is guessed or defaulted on a bad value.

Formats (ROCm/gpu-operator example/gpu-validation-cluster/configs/cluster-validation-config.yaml and
its README, 2026):
- message sizes as rccl-tests' `-b`/`-e` take them: an integer with an optional K/M/G/T suffix
  (powers of 1024, rccl-tests common.cu `parsesize`);
- booleans `"true"` / `"false"`;
- `PHASE3_AMD_NIC_PCI_IDS`: comma-separated `vendor:device` pairs of 4 hex digits;
- `NODE_SELECTOR_LABELS`: one `key=value` per line (a leading `- ` is tolerated, as the orchestrator's
  own sed does);
- `GPU_VALIDATION_STAGES_JSON` / `TESTS_JSON`: JSON documents.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from upgrade_gate import docio
from upgrade_gate.errors import ConfigError, InputError

_SIZE_RE = re.compile(r"(\d+)([KMGTkmgt]?)")
_SIZE_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_PCI_ID_RE = re.compile(r"[0-9a-f]{4}:[0-9a-f]{4}")
_LABEL_KEY_RE = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
)


def bad(key: str, source: str, raw: object, what: str) -> ConfigError:
    """The one-line error for a malformed value."""
    shown = repr(raw)
    return ConfigError(f"{source}: {key}: {what}, got {shown if len(shown) <= 80 else shown[:77] + '...'}")


def text(key: str, raw: object, source: str) -> str:
    """A scalar as text (numbers and booleans as YAML would print them)."""
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if isinstance(raw, int | float | str):
        return str(raw).strip()
    raise bad(key, source, raw, "expected a scalar value")


def integer(key: str, raw: object, source: str, *, minimum: int = 0, maximum: int | None = None) -> int:
    """A whole number >= minimum (and <= maximum, when given)."""
    value = text(key, raw, source)
    if not re.fullmatch(r"[+-]?\d+", value) or isinstance(raw, float):
        raise bad(key, source, raw, "expected a whole number")
    if len(value.lstrip("+-")) > 18:  # int() of thousands of digits is refused by Python itself (ValueError)
        raise bad(key, source, raw, "expected a whole number of at most 18 digits")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
        raise bad(key, source, raw, f"expected a whole number {bounds}")
    return number


def number(key: str, raw: object, source: str, *, positive: bool = False) -> float:
    """A finite number (> 0 when `positive`, else >= 0)."""
    value = text(key, raw, source)
    try:
        out = float(value)
    except ValueError:
        raise bad(key, source, raw, "expected a number") from None
    if not math.isfinite(out) or out < 0 or (positive and out == 0):
        raise bad(key, source, raw, "expected a positive number" if positive else "expected a number >= 0")
    return out


def boolean(key: str, raw: object, source: str) -> bool:
    """`true` / `false` (any case)."""
    value = text(key, raw, source).lower()
    if value not in ("true", "false"):
        raise bad(key, source, raw, "expected true or false")
    return value == "true"


def size(key: str, raw: object, source: str) -> tuple[str, int]:
    """(text as given, bytes) of an rccl-tests message size such as `1K` or `2G`."""
    value = text(key, raw, source)
    m = _SIZE_RE.fullmatch(value)
    if m is None:
        raise bad(key, source, raw, "expected a size such as 1K, 8M or 2G")
    out = int(m.group(1)) * _SIZE_UNITS[m.group(2).upper()]
    if out <= 0:
        raise bad(key, source, raw, "expected a size > 0")
    return value, out


def pci_ids(key: str, raw: object, source: str) -> tuple[str, ...]:
    """Comma-separated `vendor:device` pairs, lower-cased."""
    items = tuple(p.strip().lower() for p in text(key, raw, source).split(",") if p.strip())
    if not items or not all(_PCI_ID_RE.fullmatch(p) for p in items):
        raise bad(key, source, raw, "expected comma-separated vendor:device pairs such as 1dd8:1002")
    return items


def label_key(key: str, raw: object, source: str) -> str:
    """A Kubernetes label key (`[prefix/]name`)."""
    value = text(key, raw, source)
    if not _LABEL_KEY_RE.fullmatch(value) or len(value.rpartition("/")[2]) > 63:
        raise bad(key, source, raw, "expected a Kubernetes label key such as amd.com/nic-health")
    return value


def selector(key: str, raw: object, source: str) -> tuple[tuple[str, str], ...]:
    """`key=value` lines (a leading `- ` tolerated) as pairs."""
    pairs: list[tuple[str, str]] = []
    for line in text(key, raw, source).splitlines():
        item = re.sub(r"^-\s*", "", line.strip())
        if not item:
            continue
        name, eq, value = item.partition("=")
        if not eq:
            raise bad(key, source, raw, "expected one key=value label per line")
        pairs.append((label_key(key, name.strip(), source), value.strip()))
    if not pairs:
        raise bad(key, source, raw, "expected at least one key=value label")
    return tuple(pairs)


def json_value(key: str, raw: object, source: str) -> Any:
    """A JSON document held in a string value (or already a YAML structure)."""
    if isinstance(raw, list | dict):
        return raw
    try:
        return docio.loads_json(text(key, raw, source), source=f"{source}: {key}")
    except InputError as exc:  # NaN / Infinity: a threshold that compares false with everything
        raise ConfigError(str(exc)) from None
    except json.JSONDecodeError as exc:
        raise bad(
            key, source, raw if len(str(raw)) < 60 else str(raw)[:57] + "...", f"invalid JSON ({exc.msg})"
        ) from None
