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


_noise = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from(":[]()\t\x1b#=*0123456789"),
    max_size=12,
)


@st.composite
def _edited(draw: st.DrawFn, seeds: tuple[str, ...]) -> str:
    text = draw(st.sampled_from(seeds))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        lines = text.split("\n")
        op = draw(st.sampled_from(("delete", "duplicate", "truncate", "insert", "swap", "replace_line")))
        i = draw(st.integers(min_value=0, max_value=max(len(lines) - 1, 0)))
        if op == "delete" and lines:
            del lines[i]
            text = "\n".join(lines)
        elif op == "duplicate" and lines:
            lines.insert(i, lines[i])
            text = "\n".join(lines)
        elif op == "replace_line" and lines:
            lines[i] = draw(_noise)
            text = "\n".join(lines)
        elif op == "truncate":
            text = text[: draw(st.integers(min_value=0, max_value=len(text)))]
        elif op == "insert":
            pos = draw(st.integers(min_value=0, max_value=len(text)))
            text = text[:pos] + draw(_noise) + text[pos:]
        elif op == "swap" and len(text) > 1:
            pos = draw(st.integers(min_value=0, max_value=len(text) - 2))
            text = text[:pos] + text[pos + 1] + text[pos] + text[pos + 2 :]
    return text


def edited_text(texts: Sequence[str]) -> st.SearchStrategy[str]:
    """One of `texts` with 1-3 edits: a line deleted, duplicated or replaced by noise, the text
    truncated, noise inserted, or two characters swapped."""
    return _edited(tuple(texts))
