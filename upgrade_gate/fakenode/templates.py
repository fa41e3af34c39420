"""Template files of the fake nodes (`upgrade_gate/data/fakenode/`) and the one way to fill them.

Every template is a real tool output from `../shared/corpus/` with the node-specific values replaced by
`{{NAME}}` placeholders (tests/fixtures/fakenode/PROVENANCE.md lists source and derivation per file).
`fill` replaces every placeholder and refuses to leave one behind or to get a value it has no place
for, so a renamed placeholder fails loudly at build time instead of leaking `{{X}}` into an output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

_PLACEHOLDER = re.compile(r"\{\{([A-Z0-9_]+)\}\}")


@cache
def load_template(name: str) -> str:
    """The text of one template file (cached; templates are read-only package data)."""
    ref = resources.files("upgrade_gate").joinpath("data", "fakenode", name)
    return ref.read_text(encoding="utf-8")


def load_json_template(name: str) -> Any:
    """One JSON template, parsed fresh on every call (callers mutate the result)."""
    return json.loads(load_template(name))


def fill(template: str, values: Mapping[str, object]) -> str:
    """Replace every `{{NAME}}` in `template` with `str(values[NAME])`; all names must match."""
    wanted = set(_PLACEHOLDER.findall(template))
    missing = wanted - set(values)
    unused = set(values) - wanted
    if missing or unused:
        raise ValueError(f"template placeholders mismatch: missing {sorted(missing)}, unused {sorted(unused)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def fill_sequence(template: str, name: str, values: list[str]) -> str:
    """Replace the occurrences of `{{name}}` one by one, in order, with `values`."""
    token = "{{" + name + "}}"
    if template.count(token) != len(values):
        raise ValueError(f"{token} occurs {template.count(token)} times, got {len(values)} values")
    for value in values:
        template = template.replace(token, value, 1)
    return template
