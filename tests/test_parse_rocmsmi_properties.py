"""Property tests: mutated rocm-smi outputs either parse or raise ParseError, nothing else.

Each generated input is fed to every rocm-smi parser, so every parser sees all mutations (of its own
command's output and of every other command's) while the examples are generated once.
"""

from __future__ import annotations

import contextlib

from hypothesis import HealthCheck, given, settings

from tests.conftest import FIXTURES
from tests.test_parse_amdsmi_mutations import mutated_json, mutated_text, outputs
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import rocmsmi

TEXTS, JSONS = outputs(FIXTURES / "rocm-smi")
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _every_parser(text: str) -> None:
    for parse in rocmsmi.PARSERS.values():
        with contextlib.suppress(ParseError):
            parse(text)


@SETTINGS
@given(text=mutated_text(TEXTS))
def test_parse_rocmsmi_mutated_text_raises_only_parse_error(text: str) -> None:
    _every_parser(text)


@SETTINGS
@given(text=mutated_json(JSONS))
def test_parse_rocmsmi_mutated_json_raises_only_parse_error(text: str) -> None:
    _every_parser(text)
