"""Label and field selectors with the API server's syntax and semantics (test double).

From the Kubernetes reference "Labels and Selectors":
- equality-based: `key=value`, `key==value`, `key!=value` (`!=` also matches objects without the key);
- set-based: `key in (a,b)`, `key notin (a,b)` (notin also matches objects without the key), `key`
  (exists), `!key` (does not exist);
- requirements are comma-separated and ANDed; whitespace around tokens is ignored.
Field selectors support `=`, `==` and `!=` on a per-resource set of fields; an unsupported field is a
400 BadRequest, as on a real server ("field label not supported").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_KEY = r"(?:[A-Za-z0-9.\-]+/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_EQ_RE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
_EXISTS_RE = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


class SelectorError(ValueError):
    """The selector does not parse (the server answers 400 BadRequest)."""


@dataclass(frozen=True)
class Requirement:
    """One ANDed requirement of a label selector."""

    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether an object's labels satisfy this requirement."""
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values  # "!=" and "notin"


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_label_selector(text: str | None) -> tuple[Requirement, ...]:
    """Parse a label selector; raises SelectorError."""
    if text is None or not text.strip():
        return ()
    reqs: list[Requirement] = []
    for part in _split_top_level(text):
        if not part.strip():
            raise SelectorError(f"empty requirement in selector {text!r}")
        if m := _SET_RE.match(part):
            values = tuple(v.strip() for v in m["values"].split(",") if v.strip())
            if not values:
                raise SelectorError(f"for 'in', 'notin' operators, values set can't be empty: {part!r}")
            reqs.append(Requirement(m["key"], m["op"], values))
        elif m := _EQ_RE.match(part):
            reqs.append(Requirement(m["key"], "!=" if m["op"] == "!=" else "=", (m["value"],)))
        elif m := _EXISTS_RE.match(part):
            reqs.append(Requirement(m["key"], "!" if m["neg"] else "exists"))
        else:
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
    return tuple(reqs)


def match_labels(reqs: tuple[Requirement, ...], labels: Mapping[str, str] | None) -> bool:
    """All requirements hold (an empty selector matches everything)."""
    return all(r.matches(labels or {}) for r in reqs)


def _get_path(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


# Fields each resource accepts in a fieldSelector (metadata.name/namespace are always supported).
FIELDS: dict[str, frozenset[str]] = {
    "nodes": frozenset({"spec.unschedulable"}),
    "pods": frozenset({"spec.nodeName", "status.phase", "spec.restartPolicy", "spec.serviceAccountName"}),
    "jobs": frozenset({"status.successful"}),
    "configmaps": frozenset(),
    "mpijobs": frozenset(),
}


def parse_field_selector(text: str | None, resource: str) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate for a field selector; raises SelectorError on syntax or an unsupported field."""
    if text is None or not text.strip():
        return lambda _obj: True
    allowed = FIELDS.get(resource, frozenset()) | {"metadata.name", "metadata.namespace"}
    terms: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        m = re.match(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError(f"invalid field selector: {part!r}")
        field, op, value = m.group(1), m.group(2), m.group(3)
        if field not in allowed:
            raise SelectorError(f'"{field}" is not a known field selector: only "{", ".join(sorted(allowed))}"')
        terms.append((field, op != "!=", value))

    def predicate(obj: Mapping[str, Any]) -> bool:
        return all((_get_path(obj, f) == v) == eq for f, eq, v in terms)

    return predicate
