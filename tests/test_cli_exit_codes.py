"""One place maps outcomes to exit codes: each documented code is pinned here."""

from __future__ import annotations

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode


def test_exit_codes_match_the_design_contract() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "PASS": 0,
        "BLOCK": 1,
        "USAGE": 2,
        "BAD_INPUT": 3,
        "ENVIRONMENT": 4,
        "INTERRUPTED": 130,
    }


def test_cli_version_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["--version"]) == 0
    assert "upgrade-gate" in capsys.readouterr().out


def test_cli_unknown_command_is_usage_error() -> None:
    assert run(["no-such-command"]) == ExitCode.USAGE


def test_cli_unknown_option_is_usage_error() -> None:
    assert run(["--no-such-flag"]) == ExitCode.USAGE
