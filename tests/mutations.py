"""Hypothesis strategies shared by the parser property tests: real outputs, mutated line by line."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st


@st.composite
def _mutated(draw: st.DrawFn, texts: Sequence[str]) -> str:
    lines = draw(st.sampled_from(texts)).splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["drop", "dup", "insert", "truncate", "chars"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=40)) + "\n")
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        else:
            pos = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:pos] + draw(st.text(max_size=3)) + lines[i][pos:]
    return "".join(lines)


def mutated_lines(texts: Sequence[str]) -> st.SearchStrategy[str]:
    """One of `texts` with 1-4 lines dropped, duplicated, inserted, truncated or garbled."""
    return _mutated(list(texts))
