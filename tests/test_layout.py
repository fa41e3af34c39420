"""The repository layout of the design card: schemas/, checklists/ and baselines/ at the top level.

One copy of each data folder, found by a checkout (these tests run from one) and by a wheel: the
wheel's content is what setuptools' `build_py` puts into the build folder, so the test runs it on a
copy of the sources (installed setuptools, no network) and imports the built package from another
directory. tools/check_install.sh does the same with `pip install .` into a fresh venv.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.test_store_gitstore import snapshot_for
from upgrade_gate import schemas, shipped
from upgrade_gate.cli.main import run
from upgrade_gate.judge.checklist import SHIPPED, load_checklist, load_checklists
from upgrade_gate.snapshot.io import write_snapshot


def test_layout_one_copy_of_each_data_folder() -> None:
    assert shipped.folder("schemas") == REPO / "schemas"
    assert shipped.folder("checklists") == REPO / "checklists"
    for stale in ("schemas", "checklists", "_schemas", "_checklists"):
        assert not (REPO / "upgrade_gate" / stale).exists(), f"a second copy: upgrade_gate/{stale}"
    assert set(schemas.schema_names()) >= {"snapshot", "report", "manifest", "change-plan", "policy", "window"}
    assert sorted(SHIPPED) == sorted(p.stem for p in (REPO / "checklists").glob("*.yaml"))
    assert (REPO / "baselines" / "README.md").is_file()


def test_layout_checklist_option_takes_a_site_folder(tmp_path: Path) -> None:
    site = tmp_path / "site-checklists"
    site.mkdir()
    text = (REPO / "checklists" / "canary.yaml").read_text(encoding="utf-8")
    (site / "b-ours.yaml").write_text(text.replace("name: canary", "name: ours"), encoding="utf-8")
    (site / "a-canary.yaml").write_text(text, encoding="utf-8")
    (site / "notes.txt").write_text("not a checklist", encoding="utf-8")
    loaded = load_checklists([str(site), "observe"])
    assert [c.name for c in loaded] == ["canary", "ours", "observe"]
    assert loaded[0].source == str(site / "a-canary.yaml")
    assert [c.name for c in load_checklists(["canary"])] == [load_checklist("canary").name]


def test_layout_checklist_folder_without_checklists_is_not_found(tmp_path: Path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    assert run(["gate", "--store", str(tmp_path / "store"), "--checklist", str(tmp_path / "empty")]) == 3
    assert "a folder without checklists" in capsys.readouterr().err


def test_layout_store_defaults_to_baselines_in_the_current_directory(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UPGRADE_GATE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    snap = tmp_path / "a.json"
    write_snapshot(snapshot_for("node-a"), snap)
    (tmp_path / "baselines").mkdir()
    readme = "# our baselines\n"
    (tmp_path / "baselines" / "README.md").write_text(readme, encoding="utf-8")
    assert run(["baseline", "save", str(snap)]) == 0
    assert "saved 1 node(s) to baselines" in capsys.readouterr().out
    assert (tmp_path / "baselines" / ".git").is_dir()
    assert (tmp_path / "baselines" / "README.md").read_text(encoding="utf-8") == readme  # kept, committed
    assert run(["baseline", "list"]) == 0
    assert capsys.readouterr().out == "node-a\n"


def test_layout_store_default_refuses_a_folder_with_other_files(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("UPGRADE_GATE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    snap = tmp_path / "a.json"
    write_snapshot(snapshot_for("node-a"), snap)
    (tmp_path / "baselines").mkdir()
    (tmp_path / "baselines" / "notes.txt").write_text("mine\n", encoding="utf-8")
    assert run(["baseline", "save", str(snap)]) == 4
    assert "is not empty and is not a baseline store" in capsys.readouterr().err


def test_layout_wheel_build_ships_the_data_folders(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("upgrade_gate", "schemas", "checklists"):
        shutil.copytree(REPO / name, src / name, ignore=ignore)
    build = tmp_path / "build"
    subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(build)],
        cwd=src,
        check=True,
        capture_output=True,
    )
    package = build / "upgrade_gate"
    for folder, pattern in (("schemas", "*.schema.json"), ("checklists", "*.yaml")):
        for original in (REPO / folder).glob(pattern):
            assert (package / f"_{folder}" / original.name).read_bytes() == original.read_bytes()
    assert not (build / "schemas").exists() and not (build / "checklists").exists()  # nothing top-level
    assert (package / "data" / "default-policy.yaml").is_file()
    probe = (
        "import json; from upgrade_gate import schemas, shipped; "
        "from upgrade_gate.judge.checklist import load_checklist; "
        "print(json.dumps([str(shipped.folder('schemas')), str(shipped.folder('checklists')), "
        "schemas.load_schema('snapshot')['title'], load_checklist('canary').name]))"
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(build)}
    out = subprocess.run([sys.executable, "-c", probe], cwd=elsewhere, env=env, check=True, capture_output=True)
    found = json.loads(out.stdout)
    assert found == [str(package / "_schemas"), str(package / "_checklists"), "upgrade-gate node snapshot", "canary"]
