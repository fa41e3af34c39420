"""Issue 26: a folder that becomes a store keeps its README, read to a cap and never through a link."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from upgrade_gate.errors import ExitCode, InputError
from upgrade_gate.store.gitstore import MAX_README_BYTES, BaselineStore


def _show(store: Path, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(store), "show", f"HEAD:{path}"], check=True, capture_output=True).stdout


def test_a_folder_with_its_own_readme_keeps_it(tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    store.mkdir()
    (store / "README.md").write_bytes(b"# our baselines\n")
    BaselineStore(store).init()
    assert _show(store, "README.md") == b"# our baselines\n"


def test_a_readme_over_the_cap_is_refused_and_no_store_is_made(tmp_path: Path) -> None:
    store = tmp_path / "baselines"
    store.mkdir()
    (store / "README.md").write_bytes(b"x" * (MAX_README_BYTES + 1))
    with pytest.raises(InputError, match=r"README\.md") as err:
        BaselineStore(store).init()
    assert err.value.exit_code == ExitCode.BAD_INPUT
    head = subprocess.run(["git", "-C", str(store), "rev-parse", "--verify", "-q", "HEAD"], capture_output=True)
    assert head.returncode != 0  # no commit was written


def test_a_readme_that_is_a_link_is_not_followed(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("not for the store\n")
    store = tmp_path / "baselines"
    store.mkdir()
    (store / "README.md").symlink_to(secret)
    with pytest.raises(InputError, match=r"README\.md"):
        BaselineStore(store).init()
