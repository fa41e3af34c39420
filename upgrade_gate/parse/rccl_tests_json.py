"""Reader for rccl-tests' `-Z json` result file, and `merge_json` (text sweep + JSON numbers).

Format (rocm-systems projects/rccl-tests/src/common.cu @491c996, `Reporter::writeFile`): a JSON array of
flat records; older ROCm/rccl-tests common.cu @c0eac93 wrote one record per line (no `numCycle`).
Numbers come from std::to_string; `wrong` is a quoted string ("0" / "N/A"). The file carries no sweep
header, so a JSON-only result has `settings=None` until `merge_json` joins it to the text run.
"""

from __future__ import annotations

import json
import math
from typing import Any

from upgrade_gate.errors import ParseError
from upgrade_gate.model import replace
from upgrade_gate.parse.common import is_na
from upgrade_gate.parse.rccl_tests_types import TOOL, RcclRow, RcclSample, RcclTestsResult


def _finite(value: Any) -> float:
    out = float(value)
    if not math.isfinite(out):
        raise ValueError(f"non-finite number {value!r}")
    return out


def _json_records(text: str) -> list[tuple[int, dict[str, Any]]]:
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            data = json.loads(text)
            if not isinstance(data, list):
                raise ParseError(TOOL, 0, text[:80], "JSON is not an array of records")
            return [(0, r) for r in data]
        return [(no, json.loads(line)) for no, line in enumerate(text.splitlines(), 1) if line.strip()]
    except (ValueError, RecursionError) as exc:
        raise ParseError(TOOL, getattr(exc, "lineno", 0), text[:80], f"invalid JSON: {exc}") from None


def parse_rccl_tests_json(text: str) -> RcclTestsResult:
    """Parse a `-Z json` file (a JSON array of records, or one record per line); no sweep settings."""
    rows: dict[tuple[int, int, str, str], dict[str, Any]] = {}
    names: set[str] = set()
    ranks: set[int] = set()
    for no, rec in _json_records(text):
        if not isinstance(rec, dict):
            raise ParseError(TOOL, no, str(rec)[:80], "JSON record is not an object")
        try:
            key = (int(rec.get("numCycle", 0)), int(rec["size"]), str(rec["type"]), str(rec["redop"]))
            half = "in_place" if int(rec["inPlace"]) else "out_of_place"
            wrong = str(rec["wrong"])
            sample = RcclSample(
                time_us=_finite(rec["time"]),
                algbw_gbs=_finite(rec["algBw"]),
                busbw_gbs=_finite(rec["busBw"]),
                wrong=None if is_na(wrong) else int(wrong),
            )
            ranks.add(int(rec["ranks"] if "ranks" in rec else rec["gpus"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ParseError(TOOL, no, json.dumps(rec)[:80], f"bad rccl-tests JSON record: {exc!r}") from None
        names.add(str(rec.get("name", "")))
        slot = rows.setdefault(key, {"no": no})
        if half in slot:
            raise ParseError(TOOL, no, json.dumps(rec)[:80], "duplicate record for size/type/redop/inPlace")
        slot[half] = sample
    if not rows:
        raise ParseError(TOOL, 0, text[:80], "no JSON records")
    if len(ranks) != 1 or len(names) != 1:
        raise ParseError(TOOL, 0, text[:80], "JSON records disagree on ranks or collective name")
    out = tuple(
        RcclRow(
            size=size,
            count=None,
            type=dtype,
            redop=redop,
            root=None,
            out_of_place=slot.get("out_of_place"),
            in_place=slot.get("in_place"),
            cycle=cyc,
            line_no=slot["no"],
        )
        for (cyc, size, dtype, redop), slot in rows.items()
    )
    return RcclTestsResult(
        source_format="json", settings=None, rows=out, ranks=ranks.pop(), collective=names.pop() or None
    )


def merge_json(text_result: RcclTestsResult, json_result: RcclTestsResult) -> RcclTestsResult:
    """The text run with its rows' numbers replaced by the JSON file's full-precision values."""
    if text_result.settings is None or json_result.source_format != "json":
        raise ParseError(TOOL, 0, "", "merge_json needs a text result and a JSON result")
    keys = [(r.cycle, r.size, r.type, r.redop) for r in text_result.rows]
    by_key = {(r.cycle, r.size, r.type, r.redop): r for r in json_result.rows}
    if len(by_key) != len(json_result.rows) or set(keys) != set(by_key) or len(set(keys)) != len(keys):
        raise ParseError(TOOL, 0, "", "JSON records do not match the text table's rows")
    for row, k in zip(text_result.rows, keys, strict=True):
        for mine, theirs in ((row.out_of_place, by_key[k].out_of_place), (row.in_place, by_key[k].in_place)):
            # The table prints bandwidths with 2 decimals: the JSON must round to the same values.
            if (mine is None) != (theirs is None) or (
                mine is not None
                and theirs is not None
                and max(abs(mine.busbw_gbs - theirs.busbw_gbs), abs(mine.algbw_gbs - theirs.algbw_gbs)) > 0.0051
            ):
                raise ParseError(TOOL, row.line_no, str(row.size), "JSON record disagrees with the text table")
            # The JSON's samples replace the text's: its "wrong" must be the table's #wrong (both N/A or equal).
            if mine is not None and theirs is not None and mine.wrong != theirs.wrong:
                raise ParseError(
                    TOOL, row.line_no, str(row.size), f"JSON wrong {theirs.wrong} disagrees with the table's #wrong "
                    f"{mine.wrong} (None: N/A)",
                )  # fmt: skip
    rows = tuple(
        replace(r, out_of_place=by_key[k].out_of_place, in_place=by_key[k].in_place)
        for r, k in zip(text_result.rows, keys, strict=True)
    )
    return replace(text_result, rows=rows, source_format="text+json")
