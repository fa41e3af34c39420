"""Issue 26: the window's plan file is read once, to the YAML cap, and its recorded sha256 is of the bytes
that were parsed (a second, unbounded read could hash another file than the one judged)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from upgrade_gate import docio
from upgrade_gate.errors import ExitCode, InputError
from upgrade_gate.fleet.window import load_plan_document

PLAN = Path(__file__).resolve().parents[1] / "examples" / "plans" / "rocm-6.1.3-to-6.2.0.yaml"


def test_the_plan_digest_is_of_the_bytes_parsed(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_bytes(PLAN.read_bytes())
    plan, raw, digest = load_plan_document(plan_file)
    assert digest == hashlib.sha256(PLAN.read_bytes()).hexdigest()
    assert raw["id"] == plan.id


def test_a_plan_over_the_yaml_cap_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    plan_file.write_bytes(PLAN.read_bytes() + b"#" + b"x" * docio.MAX_YAML_BYTES + b"\n")
    with pytest.raises(InputError, match=r"plan\.yaml") as err:
        load_plan_document(plan_file)
    assert err.value.exit_code == ExitCode.BAD_INPUT
