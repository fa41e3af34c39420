"""README.md stays true: its quick start is what CI runs, its commands exist and work, the reference is fresh.

- The quick start is exactly two commands, and the test command is the one `.ci/run` runs.
- docs/configuration.md is what `tools/gen_config_reference.py` generates from the schemas now.
- Every `upgrade-gate ...` command the README names has a working `--help`.
- The pre-upgrade snapshot workflow runs as written on a fake node: its fake tools first on PATH and
  its host-root tree added as `--host-root` (which a real node does not need). The CI workflow's
  commands are run by tests/test_examples.py.
"""

from __future__ import annotations

import contextlib
import glob
import importlib.util
import io
import os
import re
import shlex
import shutil
from pathlib import Path
from types import ModuleType

import pytest

from upgrade_gate.cli.main import run
from upgrade_gate.demo.fleet import ROCM_6_1_3, node_spec
from upgrade_gate.errors import ExitCode
from upgrade_gate.fakenode import build_fake_node
from upgrade_gate.model import NodeName
from upgrade_gate.snapshot.io import load_snapshot
from upgrade_gate.store.gitstore import BaselineStore

REPO = Path(__file__).parent.parent
README = REPO / "README.md"
CI = REPO / ".ci" / "run"
SUBCOMMAND_GROUPS = ("baseline", "window", "fleet")
"""Commands that are groups: `upgrade-gate baseline save` names the sub-command `save`."""


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _section(title: str) -> str:
    text = _readme()
    start = text.index(title)
    end = text.find("\n## ", start + len(title))
    nxt = text.find("\n### ", start + len(title))
    stops = [i for i in (end, nxt) if i != -1]
    return text[start : min(stops)] if stops else text[start:]


def _code_blocks(text: str, lang: str = "bash") -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_reference", REPO / "tools" / "gen_config_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_quick_start_is_two_commands_and_the_test_one_is_what_ci_runs() -> None:
    blocks = _code_blocks(_section("## Quick start"))
    assert [b.strip() for b in blocks] == [
        "pip install -e . && upgrade-gate demo",
        "pip install -e '.[test]' && python3 -m pytest",
    ]
    ci = [ln.strip() for ln in CI.read_text(encoding="utf-8").splitlines() if ln.strip() and not ln.startswith("#")]
    install = blocks[1].split("&&")[0].split()
    assert install == ["pip", "install", "-e", "'.[test]'"]
    assert "python3 -m pip install -q -e '.[test]'" in ci  # the same install (quietly, by the CI's python3)
    assert "python3 -m pytest" in ci  # the same test command, no extra arguments
    ran = {
        "ruff check": "python3 -m ruff check",
        "ruff format --check": "python3 -m ruff format --check",
        "mypy": "python3 -m mypy",
        "lint-imports": "lint_imports_command",
    }
    for tool, line in ran.items():
        assert any(line in ln for ln in ci), tool
        assert f"`{tool}" in _section("## Quick start"), f"the README does not say CI runs {tool}"


def test_readme_configuration_reference_is_up_to_date() -> None:
    generated = _generator().render()
    current = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert current == generated, "docs/configuration.md is stale: run python3 tools/gen_config_reference.py"
    assert "(docs/configuration.md)" in _readme()


def test_readme_generator_check_mode_agrees(tmp_path: Path) -> None:
    gen = _generator()
    out = tmp_path / "configuration.md"
    assert gen.main(["--check", "--out", str(out)]) == 1
    assert gen.main(["--out", str(out)]) == 0
    assert gen.main(["--check", "--out", str(out)]) == 0


def _code(text: str) -> str:
    """Every fenced block and inline code span of `text`, one per line (prose is left out)."""
    fenced = re.findall(r"```[a-z]*\n(.*?)```", text, flags=re.S)
    rest = re.sub(r"```[a-z]*\n.*?```", "", text, flags=re.S)
    inline = re.findall(r"`([^`\n]+)`", rest)
    return "\n".join([*fenced, *inline])


def _mentioned_commands() -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for match in re.finditer(r"upgrade-gate((?:[ \t]+[a-z][a-z-]*){1,2})", _code(_readme())):
        words = match.group(1).split()
        if words[0] in SUBCOMMAND_GROUPS and len(words) > 1:
            found.add((words[0], words[1]))
        else:
            found.add((words[0],))
    return found


def test_readme_every_command_it_names_has_help() -> None:
    commands = _mentioned_commands()
    assert {("demo",), ("capture",), ("snapshot",), ("validate",), ("gate",), ("baseline", "save")} <= commands
    for command in sorted(commands):
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = run([*command, "--help"])
        assert code == ExitCode.PASS, f"upgrade-gate {' '.join(command)} --help exited {code}"
        assert "Usage:" in out.getvalue()


def test_readme_snapshot_workflow_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = _code_blocks(_section("### 1. Pre-upgrade snapshot"))[0]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    assert all(ln.startswith("upgrade-gate ") for ln in lines)
    node = build_fake_node(tmp_path / "fake", node_spec(NodeName("gpu-node-01"), ROCM_6_1_3))
    work = tmp_path / "work"
    (work / "examples" / "cvf").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "cvf" / "cluster-validation-config.yaml", work / "examples" / "cvf")
    monkeypatch.chdir(work)
    git = shutil.which("git")
    assert git is not None, "the baseline store needs git"
    # the fake tools first (as on a real node, where the real tools are on PATH), then git for the store
    monkeypatch.setenv("PATH", f"{node.bin_dir}{os.pathsep}{Path(git).parent}")
    for line in lines:
        argv = [expanded for word in shlex.split(line)[1:] for expanded in (sorted(glob.glob(word)) or [word])]
        if argv[0] in ("capture", "validate"):
            argv += ["--host-root", str(node.host_root)]
        with contextlib.redirect_stdout(io.StringIO()) as out:
            code = run(argv)
        assert code == ExitCode.PASS, f"{line} exited {code}:\n{out.getvalue()}"
    snapshot = load_snapshot(work / "gpu-node-01.json")
    assert [p.status.value for p in snapshot.phases] == ["passed"] * 4
    assert snapshot.node.node_class == "mi300x-8gpu"  # validate --out keeps the class snapshot --class gave
    with BaselineStore(work / "baselines") as store:
        assert store.nodes("rocm-6.1.3") == ("gpu-node-01",)
        assert len(store.load("gpu-node-01", "rocm-6.1.3").gpus) == 8
