"""Typed access to one amd-smi record, the same for its text and its JSON form.

amd-smi builds one Python dict per GPU and then either dumps it as JSON or upper-cases its keys and
prints it as an indented `KEY: value` tree (amdsmi_logger.py, `_convert_json_to_human_readable`). So
both forms are read into the same nested mapping with lower-case keys (`amdsmi_text` /
`amdsmi_json`), and `Fields` gives typed, fail-closed access to it.

Design notes:
- A value printed as `N/A` becomes None and the caller's field name is appended to the shared `na`
  list; a key that is absent is None and not recorded (older releases simply lack it).
- A whole section that is a string instead of a mapping (`"ras": "N/A"`, or an error text amd-smi
  stored when a library call failed) counts as not available, never as data.
- Quantities come as `{"value": 196592, "unit": "MB"}` objects in JSON since ROCm 6.1 (CHANGELOG
  "Added units of measure to JSON output") and as `"64289 MB"` strings in text. amd-smi's "MB"/"GB"
  are binary (the library divides bytes by 1024 twice: 196592 MB on a 192 GiB MI300X), so sizes
  convert to MiB with factors of 1024.
- Errors name the tool, the line (text form; 0 for JSON) and the dotted path of the value.
- A number, quantity or BDF printed as an error text (`AMDSMI_STATUS_NOT_SUPPORTED - ...`, a
  permission banner; `sanity.error_text`) is not available like N/A, not a format error that would
  lose the whole record. Strings are kept as printed; the snapshot builder rejects error texts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from upgrade_gate.errors import ParseError
from upgrade_gate.model import Bdf
from upgrade_gate.parse.common import is_na, normalize_bdf
from upgrade_gate.parse.sanity import error_text

Where = Mapping[str, tuple[int, str]]  # dotted path -> (line number, raw line) for text input

_QUANTITY_RE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z/%°]+)$")
_INT_RE = re.compile(r"^[+-]?\d{1,19}$")
_MAX_MIB = float(1 << 53)  # 8 ZiB: beyond it a float no longer holds every whole MiB
_BINARY_UNITS = {"B": 0, "KB": 1, "KIB": 1, "MB": 2, "MIB": 2, "GB": 3, "GIB": 3, "TB": 4, "TIB": 4}


def to_mib(value: float, unit: str, *, tool: str, line_no: int, excerpt: str) -> int:
    """Convert a size with an amd-smi unit (binary B/KB/MB/GB/TB) to whole MiB."""
    power = _BINARY_UNITS.get(unit.upper())
    if power is None:
        raise ParseError(tool, line_no, excerpt, f"unknown size unit {unit!r}")
    mib = value * float(1 << (10 * power)) / float(1 << 20)
    if not 0 <= mib < _MAX_MIB:  # also inf and NaN: 1.7e302 MB once raised OverflowError here
        raise ParseError(tool, line_no, excerpt, f"size {value:g} {unit} is out of range")
    if abs(mib - round(mib)) > 1e-6:
        raise ParseError(tool, line_no, excerpt, "size is not a whole number of MiB")
    return round(mib)


class Fields:
    """Typed, fail-closed reader over one mapping of an amd-smi record."""

    __slots__ = ("_data", "_na", "_path", "_tool", "_where")

    def __init__(
        self,
        tool: str,
        data: Mapping[str, object],
        *,
        path: str = "",
        where: Where | None = None,
        na: list[str] | None = None,
    ) -> None:
        self._tool = tool
        self._data = data
        self._path = path
        self._where: Where = where if where is not None else {}
        self._na: list[str] = na if na is not None else []

    @property
    def tool(self) -> str:
        """The parser tool name errors are reported under."""
        return self._tool

    @property
    def na(self) -> list[str]:
        """Field names whose value was printed as N/A (shared with child readers)."""
        return self._na

    def keys(self) -> frozenset[str]:
        """The keys this mapping holds."""
        return frozenset(self._data)

    def has(self, key: str) -> bool:
        """True when the key is present (whatever its value)."""
        return key in self._data

    def raw(self, key: str) -> object:
        """The value as read, or None when absent."""
        return self._data.get(key)

    def error(self, key: str, message: str) -> ParseError:
        """A ParseError pointing at `key` (its line in text form)."""
        dotted = f"{self._path}.{key}" if self._path else key
        line_no, raw = self._where.get(dotted, (0, f"{dotted}={self._data.get(key)!r}"))
        return ParseError(self._tool, line_no, raw, f"{message} ({dotted})")

    def child(self, key: str, field: str | None = None) -> Fields | None:
        """The nested section `key`, or None when absent or not available (N/A / error text)."""
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, Mapping):
            dotted = f"{self._path}.{key}" if self._path else key
            return Fields(self._tool, value, path=dotted, where=self._where, na=self._na)
        if isinstance(value, str):
            self._na.append(field or key)
            return None
        raise self.error(key, "expected a section")

    def entries(self, key: str) -> list[Fields]:
        """The blocks of a list (JSON) or of numbered sub-blocks (text `FW 0:`, `FW 1:` ...)."""
        value = self._data.get(key)
        dotted = f"{self._path}.{key}" if self._path else key
        if isinstance(value, list):
            pairs = [(f"{dotted}[{pos}]", item) for pos, item in enumerate(value)]
        elif isinstance(value, Mapping):
            pairs = [(f"{dotted}.{name}", item) for name, item in value.items()]
        else:
            raise self.error(key, "expected a list of blocks")
        out = []
        for path, item in pairs:
            if not isinstance(item, Mapping):
                raise self.error(key, "expected a block")
            out.append(Fields(self._tool, item, path=path, where=self._where, na=self._na))
        return out

    def text(self, key: str, field: str) -> str | None:
        """A string value (numbers as printed), None when absent or N/A."""
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, bool):
            return str(value)
        if isinstance(value, int | float):
            return str(value)
        if not isinstance(value, str):
            raise self.error(key, "expected a scalar value")
        if is_na(value):
            self._na.append(field)
            return None
        return value.strip()

    def integer(self, key: str, field: str) -> int | None:
        """An integer value (JSON number or decimal digits), None when absent or N/A."""
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            if is_na(value) or error_text(value) is not None:
                self._na.append(field)
                return None
            if _INT_RE.match(value.strip()):
                return int(value.strip())
        raise self.error(key, "expected an integer")

    def quantity(self, key: str, field: str) -> tuple[float, str] | None:
        """A number with its unit: `{"value", "unit"}` object or `"32 GT/s"` string; None if N/A."""
        value = self._data.get(key)
        if value is None:
            return None
        if isinstance(value, Mapping):
            number, unit = value.get("value"), value.get("unit")
            if isinstance(number, int | float) and not isinstance(number, bool) and isinstance(unit, str):
                return float(number), unit
            raise self.error(key, "expected a {value, unit} object")
        if isinstance(value, str):
            if is_na(value) or error_text(value) is not None:
                self._na.append(field)
                return None
            match = _QUANTITY_RE.match(value.strip())
            if match:
                return float(match.group(1)), match.group(2)
        raise self.error(key, "expected a number with a unit")

    def mib(self, key: str, field: str) -> int | None:
        """A size converted to whole MiB, None when absent or N/A."""
        found = self.quantity(key, field)
        if found is None:
            return None
        number, unit = found
        dotted = f"{self._path}.{key}" if self._path else key
        line_no, raw = self._where.get(dotted, (0, f"{dotted}={self._data.get(key)!r}"))
        return to_mib(number, unit, tool=self._tool, line_no=line_no, excerpt=raw)

    def bdf(self, key: str, field: str) -> Bdf | None:
        """A PCI address normalised to lower-case dddd:bb:dd.f, None when absent or N/A."""
        value = self.text(key, field)
        if value is None:
            return None
        if error_text(value) is not None:
            self._na.append(field)
            return None
        dotted = f"{self._path}.{key}" if self._path else key
        line_no, _ = self._where.get(dotted, (0, value))
        return normalize_bdf(value, tool=self._tool, line_no=line_no)
