"""Hypothesis strategies that mutate recorded tool outputs (no tests here; imported by the property tests).

Shared by the amd-smi and rocm-smi property tests: the only exception a parser may raise on any
mutation of a real output is `ParseError`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

JUNK = st.text(alphabet=st.sampled_from(list('0123456789abcxyzGPU[]:.,-=|/% \t\n{}"N/A\x1b^')), max_size=24)
TOKENS = st.sampled_from(["N/A", "None", "", ":", "GPU[0]", "GPU: 0", "0x", "-1", "4294967295", "...", "\t", "  "])


def _lines_op(text: str, op: str, pos: int, junk: str) -> str:
    lines = text.splitlines()
    if not lines:
        return junk
    i = pos % len(lines)
    j = (pos // 7) % len(lines)
    if op == "drop":
        del lines[i]
    elif op == "dup":
        lines.insert(i, lines[i])
    elif op == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif op == "insert":
        lines.insert(i, junk)
    elif op == "indent":
        lines[i] = junk[:4] + lines[i]
    return "\n".join(lines) + "\n"


def _chars_op(text: str, op: str, pos: int, junk: str) -> str:
    if not text:
        return junk
    i = pos % len(text)
    if op == "truncate":
        return text[:i]
    if op == "splice":
        return text[:i] + junk + text[i:]
    if op == "replace":
        return text[:i] + junk + text[i + len(junk) :]
    if op == "cut":
        return text[:i] + text[i + 1 + pos % 40 :]
    return text


OPS = ("drop", "dup", "swap", "insert", "indent", "truncate", "splice", "replace", "cut")


@st.composite
def mutated_text(draw: st.DrawFn, texts: list[str]) -> str:
    """A recorded output with one to four line- or character-level mutations."""
    text = draw(st.sampled_from(texts))
    steps = draw(
        st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10**6), JUNK | TOKENS), min_size=1, max_size=4)
    )
    for op, pos, junk in steps:
        text = _lines_op(text, op, pos, junk) if op in OPS[:5] else _chars_op(text, op, pos, junk)
    return text


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_nodes(value, (*path, key)))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            out.extend(_nodes(value, (*path, index)))
    return out


def _replace(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    head, *rest = path
    if isinstance(doc, dict):
        return {k: (_replace(v, tuple(rest), value) if k == head else v) for k, v in doc.items()}
    return [(_replace(v, tuple(rest), value) if i == head else v) for i, v in enumerate(doc)]


VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False),
    JUNK,
    TOKENS,
    st.just({}),
    st.just([]),
    st.just({"value": "x", "unit": 3}),
    st.dictionaries(st.sampled_from(["gpu", "bdf", "value", "unit", "card0", "gpu_data"]), JUNK | TOKENS, max_size=3),
)


@st.composite
def mutated_json(draw: st.DrawFn, texts: list[str]) -> str:
    """A recorded JSON output with one to three of its values replaced by values of other types."""
    doc = json.loads(draw(st.sampled_from(texts)))
    for _ in range(draw(st.integers(1, 3))):
        paths = _nodes(doc)
        path = paths[draw(st.integers(0, len(paths) - 1))]
        doc = _replace(doc, path, draw(VALUES))
    return json.dumps(doc, indent=4)


def outputs(directory: Path) -> tuple[list[str], list[str]]:
    """(text-mutation inputs, JSON-tree-mutation inputs) of a fixture folder, goldens excluded.

    JSON documents over 10 kB are left out of the character-level set: nearly every character edit
    of them only breaks JSON syntax, and the tree mutations exercise them better.
    """
    texts: list[str] = []
    jsons: list[str] = []
    for path in sorted(directory.iterdir()):
        if path.name.endswith(".expected.json") or path.suffix not in (".txt", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".txt" or len(text) < 10_000:
            texts.append(text)
        if path.suffix == ".json":
            jsons.append(text)
    return texts, jsons
