"""Parser for `rocm-smi --showbus --showtemp --showpower --json`: temperatures and power per card.

The fallback of phase 2's thermal sampling when amd-smi fails. rocm-smi's JSON is `{"card<n>": {key:
value}}` with the keys its text prints (rocm_smi.py `formatJson`); this reader takes, per card:
- `PCI Bus` (`--showbus`): the card's BDF, which maps it to the snapshot's GPU;
- `Temperature (Sensor junction) (C)`: the junction (hotspot) sensor, the one amd-smi monitor's GPU_T
  reads; `Temperature (Sensor memory) (C)` (`mem` in ROCm 2.x) for HBM;
- `Average Graphics Package Power (W)` (ROCm 2-5 captures), or `Current Socket Graphics Package Power
  (W)`, which ROCm 6 prints on MI300 parts (no capture in the corpus: rocm_smi.py source and the many
  public readers of that key); `Max Graphics Package Power (W)` is the cap, not a reading.
Keys are matched case-insensitively (ROCm 2.x prints "(c)"). `N/A` is None. `WARNING:` lines before the
JSON are skipped. A card without a `PCI Bus` is a ParseError: its readings could not be placed. So are two
cards that print one `PCI Bus` (which of them is the GPU? keeping either could hide a hot one) and a
reading that is not a finite number (`float()` takes "NaN" and "inf"; a snapshot holding one is not JSON).

Corpus: rocm-smi/mi100-6gpu-json-all-rocm5.7.1-telegraf.json, rx6700xt-json-all-rocm4.3.0-telegraf.json
(`-a --json`, a superset of these keys), legacy-2019-json-f-t-P-single-line.json (no bus: rejected).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import is_na, load_json, normalize_bdf

TOOL = "rocm-smi-thermal"
_CARD_RE = re.compile(r"^card(\d+)$")
_JUNCTION = ("temperature (sensor junction) (c)",)
_MEMORY = ("temperature (sensor memory) (c)", "temperature (sensor mem) (c)")
_POWER = ("current socket graphics package power (w)", "average graphics package power (w)")


@dataclass(frozen=True, slots=True, kw_only=True)
class RocmSmiThermalCard:
    """One card's readings."""

    card: int
    bdf: str
    junction_c: float | None = None
    memory_c: float | None = None
    power_w: float | None = None


def _number(fields: Mapping[str, object], names: tuple[str, ...], card: str) -> float | None:
    for name in names:
        if name in fields:
            raw = str(fields[name]).strip()
            if is_na(raw):
                return None
            try:
                value = float(raw)
            except ValueError:
                raise ParseError(TOOL, 0, f"{card}: {name}: {raw}", "expected a number") from None
            if not math.isfinite(value):  # float() takes "NaN" and "inf": no reading, and not JSON either
                raise ParseError(TOOL, 0, f"{card}: {name}: {raw}", "expected a finite number")
            return value
    return None


def parse_rocmsmi_thermal(text: str) -> tuple[RocmSmiThermalCard, ...]:
    """The cards of rocm-smi's JSON with their BDF, junction and memory temperature and power."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("WARNING"))
    doc = load_json(body, tool=TOOL)
    if not isinstance(doc, dict):
        raise ParseError(TOOL, 0, text[:80], "expected a JSON object of cards")
    cards: list[RocmSmiThermalCard] = []
    owner: dict[str, str] = {}  # BDF -> the card that printed it first
    for name, value in doc.items():
        match = _CARD_RE.match(str(name))
        if match is None:
            continue  # "system"
        if not isinstance(value, dict):
            raise ParseError(TOOL, 0, str(name), "a card that is not an object")
        fields = {str(k).strip().lower(): v for k, v in value.items()}
        bus = fields.get("pci bus")
        if bus is None or is_na(str(bus)):
            raise ParseError(TOOL, 0, str(name), "a card without its PCI Bus (was --showbus given?)")
        bdf = str(normalize_bdf(str(bus), tool=TOOL, line_no=0))
        first = owner.setdefault(bdf, str(name))
        if first != name:
            raise ParseError(TOOL, 0, f"{name}: PCI Bus: {bus}", f"{first} and {name} both print PCI Bus {bdf}")
        cards.append(
            RocmSmiThermalCard(
                card=int(match.group(1)),
                bdf=bdf,
                junction_c=_number(fields, _JUNCTION, name),
                memory_c=_number(fields, _MEMORY, name),
                power_w=_number(fields, _POWER, name),
            )
        )
    if not cards:
        raise ParseError(TOOL, 0, text[:80], "no card in the output")
    return tuple(cards)


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_rocmsmi_thermal}
