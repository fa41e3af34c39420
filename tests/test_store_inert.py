"""The store is inert data (issue 26, case 3): nothing a baseline store holds, and nothing a config file
beside it says, makes upgrade-gate run a program, read objects from elsewhere, or write outside the
store's own folder. A real repository gets every executing setting planted (each pointing at a program
that records that it ran); every command that reads or writes the store then runs and nothing runs."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.judge_scenarios import mi300x_snapshot, upgraded
from tests.test_cli_gate import PLAN
from tests.test_store_gitstore import assert_fsck_clean, git, snapshot_for
from upgrade_gate.cli.main import run
from upgrade_gate.errors import ExitCode, StoreError
from upgrade_gate.model import replace
from upgrade_gate.snapshot.io import write_snapshot
from upgrade_gate.store.gitstore import BaselineStore

# Every hook githooks(5) names (a few run only for commands the store never uses: planted anyway).
HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout", "post-merge",
    "pre-push", "pre-receive", "update", "proc-receive", "post-receive", "post-update",
    "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite", "sendemail-validate",
    "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist", "p4-post-changelist", "p4-pre-submit",
    "post-index-change",
)  # fmt: skip

# Every configuration key that names a program git may run ("DRIVER" is the attribute driver below).
PROGRAM_KEYS = (
    "core.fsmonitor", "core.pager", "core.editor", "sequence.editor", "core.askPass", "credential.helper",
    "core.sshCommand", "core.gitProxy", "diff.external", "gpg.program", "gpg.openpgp.program",
    "gpg.x509.program", "gpg.ssh.program", "gpg.ssh.defaultKeyCommand", "core.alternateRefsCommand",
    "uploadpack.packObjectsHook", "filter.DRIVER.clean", "filter.DRIVER.smudge", "filter.DRIVER.process",
    "diff.DRIVER.textconv", "diff.DRIVER.command", "merge.DRIVER.driver", "pager.log", "pager.diff",
    "pager.show", "alias.ug", "sendemail.sendmailcmd",
)  # fmt: skip

FLAGS = {
    "log.showSignature": "true",  # `git log` would run gpg.program on a signed commit
    "commit.gpgSign": "true",
    "tag.gpgSign": "true",
    "gc.auto": "1",  # an automatic gc after every command that checks (with its pre-auto-gc hook)
    "gc.autoDetach": "false",
    "filter.DRIVER.required": "true",
    "core.untrackedCache": "true",
}


def _program(bin_dir: Path, marks: Path, name: str) -> Path:
    """A script that records `name` in `marks` when anything runs it (and passes its input through)."""
    path = bin_dir / name.replace("/", "_")
    path.write_text(f'#!/bin/sh\necho "{name} $*" >> "{marks}/{path.name}"\ncat 2>/dev/null\nexit 0\n')
    path.chmod(0o755)
    return path


def plant(store: Path, tmp_path: Path) -> Path:
    """Plant every hook and executing setting in the store (and a global config); returns the marks folder."""
    marks, bin_dir, other_hooks = tmp_path / "marks", tmp_path / "bin", tmp_path / "hooks-elsewhere"
    for folder in (marks, bin_dir, other_hooks):
        folder.mkdir(exist_ok=True)
    git_dir = store / ".git"
    (git_dir / "hooks").mkdir(exist_ok=True)
    for hook in HOOKS:
        for where, folder in (("store", git_dir / "hooks"), ("hookspath", other_hooks)):
            target = folder / hook
            target.write_text(f'#!/bin/sh\necho "{hook}" >> "{marks}/{where}-hook-{hook}"\nexit 0\n')
            target.chmod(0o755)
    config: list[tuple[str, str]] = [("core.hooksPath", str(other_hooks))]
    config += [(key, str(_program(bin_dir, marks, key))) for key in PROGRAM_KEYS]
    config += list(FLAGS.items())
    # A config that includes another file (include.path, includeIf) is refused before git opens the store
    # (tests/test_store_trust_brk14.py): these commands must run, so the settings are planted directly.
    for key, value in config:
        subprocess.run(["git", "config", key.replace("DRIVER", "evil"), value], cwd=store, check=True)
    attributes = "* filter=evil diff=evil merge=evil\n"
    (git_dir / "info").mkdir(exist_ok=True)
    (git_dir / "info" / "attributes").write_text(attributes)
    (store / ".gitattributes").write_text(attributes)
    (store / "nodes" / ".gitattributes").write_text(attributes)
    return marks


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """(store, marks): a store with a tagged baseline, then every hook and program setting planted, in
    its config and in a global config the caller's environment names."""
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([mi300x_snapshot()], tag="t1", message="baseline")
    marks = plant(store, tmp_path)
    global_config = tmp_path / "global.gitconfig"
    global_config.write_text(
        f"[core]\n\thooksPath = {tmp_path / 'hooks-elsewhere'}\n"
        f"\tfsmonitor = {_program(tmp_path / 'bin', marks, 'global.fsmonitor')}\n"
        f"[init]\n\ttemplateDir = {tmp_path / 'template'}\n"
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    return store, marks


def _ran(marks: Path) -> list[str]:
    return sorted(p.name for p in marks.iterdir())


def test_planting_works_so_the_test_can_fail(planted: tuple[Path, Path]) -> None:
    """The planted settings do run under plain git: the commands below would show them if they leaked."""
    store, marks = planted
    subprocess.run(["git", "update-ref", "refs/heads/probe", "HEAD"], cwd=store, check=True)
    subprocess.run(["git", "reset", "-q"], cwd=store, check=False, capture_output=True)  # the filter fails it
    ran = _ran(marks)
    assert "hookspath-hook-reference-transaction" in ran
    assert "filter.DRIVER.process" in ran
    for mark in ran:
        (marks / mark).unlink()


def test_no_store_command_runs_anything_the_store_names(
    planted: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, marks = planted
    s = str(store)
    base = mi300x_snapshot()
    newer = tmp_path / "newer.json"
    write_snapshot(replace(base, software=replace(base.software, rocm_version="6.1.4")), newer)
    other = tmp_path / "other.json"
    write_snapshot(snapshot_for("node-b"), other)
    cand = tmp_path / "cand.json"
    write_snapshot(upgraded(), cand)
    node = str(base.node.name)
    commands = [
        ["baseline", "save", str(newer), str(other), "--store", s, "--tag", "t2"],
        ["baseline", "save", str(newer), "--store", s, "-m", "again"],
        ["baseline", "list", "--store", s],
        ["baseline", "list", "--store", s, "--ref", "t1"],
        ["baseline", "show", f"{node}@t1", "--store", s],
        ["baseline", "log", node, "--store", s],
        ["baseline", "diff", node, "t1", "t2", "--store", s],
        ["baseline", "aggregate", "--class", str(base.node.node_class), "--store", s, "--save"],
        ["baseline", "deny", "SERIAL-X", "--reason", "failed phase 3", "--store", s],
        ["baseline", "denylist", "--store", s],
        ["gate", "--store", s, "--ref", "t1", "--candidate", str(cand), "--plan", str(PLAN)],
        ["gate", "--store", s, "--candidate", str(cand), "--plan", str(PLAN)],
    ]
    for argv in commands:
        code = run(argv)
        capsys.readouterr()
        assert code in (ExitCode.PASS, ExitCode.BLOCK), argv
        assert _ran(marks) == [], argv
    # The index holds exactly the last commit (asked without reading files: plain git would run the filters).
    assert git(store, "diff-index", "--cached", "--name-only", "HEAD") == ""
    assert_fsck_clean(store)


def test_a_new_store_gets_no_hooks_from_a_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`init.templateDir` (in a global config) and GIT_TEMPLATE_DIR could copy hooks into a new store."""
    marks = tmp_path / "marks"
    marks.mkdir()
    template = tmp_path / "template"
    (template / "hooks").mkdir(parents=True)
    hook = template / "hooks" / "reference-transaction"
    hook.write_text(f'#!/bin/sh\necho x >> "{marks}/template-hook"\n')
    hook.chmod(0o755)
    global_config = tmp_path / "global.gitconfig"
    global_config.write_text(f"[init]\n\ttemplateDir = {template}\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(global_config))
    monkeypatch.setenv("GIT_TEMPLATE_DIR", str(template))
    with BaselineStore(tmp_path / "store") as st:
        st.save([snapshot_for("node-a")], tag="t1")
        st.save([snapshot_for("node-b")])
    assert _ran(marks) == []
    assert not (tmp_path / "store" / ".git" / "hooks" / "reference-transaction").exists()


def test_an_inherited_git_dir_does_not_redirect_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from another repository's hook (GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE set), a save writes the store."""
    other = tmp_path / "other"
    subprocess.run(["git", "init", "-q", str(other)], check=True)
    with BaselineStore(tmp_path / "store") as st:
        st.save([snapshot_for("node-a")])
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    with BaselineStore(tmp_path / "store") as st:
        st.save([snapshot_for("node-b")], tag="t2")
        assert st.nodes("t2") == ("node-a", "node-b")
    for var in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        monkeypatch.delenv(var)
    assert not (other / "nodes").exists() and not (other / ".git" / "index").exists()
    assert git(other, "for-each-ref") == ""
    assert git(tmp_path / "store", "status", "--porcelain") == ""


def test_a_store_borrowing_objects_through_alternates_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a")])
    alternates = store / ".git" / "objects" / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    alternates.write_text(str(tmp_path / "elsewhere" / "objects") + "\n")
    with BaselineStore(store) as st, pytest.raises(StoreError, match=r"alternates borrows objects from outside"):
        st.nodes()
    assert run(["baseline", "list", "--store", str(store)]) == ExitCode.ENVIRONMENT


def test_a_store_whose_config_moves_the_working_tree_writes_only_its_own_folder(tmp_path: Path) -> None:
    """`core.worktree` in the store's config would make git (and a naive mirror) write elsewhere."""
    store, elsewhere = tmp_path / "store", tmp_path / "elsewhere"
    elsewhere.mkdir()
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a")])
    git(store, "config", "core.worktree", str(elsewhere))
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-b")], tag="t2")
        assert st.warnings == []
    assert list(elsewhere.iterdir()) == []
    assert (store / "nodes" / "node-b.json").is_file()


def test_the_mirror_never_writes_through_a_linked_folder(tmp_path: Path) -> None:
    """`nodes` replaced by a link to another folder (a checkout of a hand-made commit, or a person): the
    save lands, the mirror refuses with a warning naming it, and the other folder is untouched."""
    store, outside = tmp_path / "store", tmp_path / "outside"
    outside.mkdir()
    (outside / "node-a.json").write_text("keep")
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a")])
    for f in (store / "nodes").iterdir():
        f.unlink()
    (store / "nodes").rmdir()
    (store / "nodes").symlink_to(outside)
    with BaselineStore(store) as st:
        sha = st.save([snapshot_for("node-a", rocm="6.2.0"), snapshot_for("node-b")], tag="t2")
        assert len(st.warnings) == 1 and "nodes in the working tree is a link" in st.warnings[0]
        assert st.load("node-a", "t2").software.rocm_version == "6.2.0"
    assert sorted(p.name for p in outside.iterdir()) == ["node-a.json"]
    assert (outside / "node-a.json").read_text() == "keep"
    assert git(store, "rev-parse", "HEAD").strip() == sha
    (store / "nodes").unlink()  # the operator removes the link: the next save restores the mirror
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-c")])
        assert st.warnings == []
    (store / "nodes" / ".gitkeep").touch()  # the test removed it with the folder; no save rewrites it
    assert git(store, "status", "--porcelain") == ""


def test_the_mirror_replaces_a_linked_file_instead_of_writing_its_target(tmp_path: Path) -> None:
    store, target = tmp_path / "store", tmp_path / "precious.txt"
    target.write_text("precious")
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-a")])
        (store / "nodes" / "node-a.json").unlink()
        (store / "nodes" / "node-a.json").symlink_to(target)
        (store / "nodes" / "node-b.json").symlink_to(target)
        st.save([snapshot_for("node-a", rocm="6.2.0"), snapshot_for("node-b")])
    assert target.read_text() == "precious"
    for name in ("node-a.json", "node-b.json"):
        mode = (store / "nodes" / name).lstat().st_mode
        assert stat.S_ISREG(mode) and stat.S_IMODE(mode) == 0o644
    assert git(store, "status", "--porcelain") == ""


def test_git_never_runs_with_the_callers_pager_or_editor_either(
    planted: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's GIT_PAGER / GIT_EDITOR are replaced too (a store command never pages or edits)."""
    store, marks = planted
    monkeypatch.setenv("GIT_PAGER", str(_program(store.parent / "bin", marks, "env.pager")))
    monkeypatch.setenv("GIT_EDITOR", str(_program(store.parent / "bin", marks, "env.editor")))
    with BaselineStore(store) as st:
        st.save([snapshot_for("node-b")], tag="t3")
        st.log("node-b")
    assert _ran(marks) == []
    assert os.environ["GIT_PAGER"].endswith("env.pager")  # the process's own environment is left alone


def _verb(args: str) -> str:
    """The git command of an argv written as `-c k=v -c k=v ... VERB ...`."""
    words = args.split()
    i = 0
    while words[i] == "-c":
        i += 2
    return words[i]


def test_every_git_process_the_store_starts_carries_the_library_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Structural: a `git` first on PATH logs each invocation (the persistent `cat-file` processes
    included); every one has the hooks path, fsmonitor and attribute settings and the environment."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    bin_dir, log = tmp_path / "bin", tmp_path / "git.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'printf "%s|%s|%s|%s\\n" "$GIT_CONFIG_NOSYSTEM" "$GIT_CONFIG_GLOBAL" "$GIT_DIR" "$*" >> "{log}"\n'
        f'exec "{real}" "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    store = tmp_path / "store"
    s = str(store)
    snap = tmp_path / "a.json"
    write_snapshot(mi300x_snapshot(), snap)
    cand = tmp_path / "cand.json"
    write_snapshot(upgraded(), cand)
    node = str(mi300x_snapshot().node.name)
    for argv in (
        ["baseline", "save", str(snap), "--store", s, "--tag", "t1"],
        ["baseline", "save", str(cand), "--store", s, "--tag", "t2", "--force"],
        ["baseline", "show", f"{node}@t1", "--store", s],
        ["baseline", "log", node, "--store", s],
        ["baseline", "deny", "SERIAL-X", "--reason", "r", "--store", s],
        ["gate", "--store", s, "--ref", "t1", "--candidate", str(cand), "--plan", str(PLAN)],
    ):
        assert run(argv) in (ExitCode.PASS, ExitCode.BLOCK), argv
        capsys.readouterr()
    calls = log.read_text().splitlines()
    verbs = {_verb(c.split("|")[3]) for c in calls}
    assert {"init", "update-ref", "diff-index", "update-index", "log"} <= verbs, verbs
    for call in calls:
        nosystem, global_config, git_dir, args = call.split("|")
        assert (nosystem, global_config) == ("1", os.devnull), call
        assert f"-c core.hooksPath={os.devnull} -c core.fsmonitor=false" in args, call
        assert "-c core.attributesFile=" in args and "-c protocol.allow=never" in args, call
        if _verb(args) != "init":
            assert git_dir == str((store / ".git").resolve()) or git_dir == str(store / ".git"), call


def test_the_store_never_calls_git_commands_that_apply_attributes_or_run_commit_hooks() -> None:
    """Filter drivers cannot be switched off by name, and gitpython's `IndexFile.commit` runs the commit
    hooks through its own `run_commit_hook`: the store's code uses neither (docs/store.md)."""
    import ast

    import upgrade_gate.store as package

    verbs = {"reset", "checkout", "add", "status", "commit", "merge", "stash", "read_tree", "checkout_index"}
    verbs |= {"apply", "am", "rebase", "cherry_pick", "gc", "fetch", "pull", "push", "clone", "restore"}
    found = []
    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
            if name in ("IndexFile", "run_commit_hook", "index_file"):
                found.append(f"{path.name}:{node.lineno}: {name}")
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute):
                if node.value.attr == "git" and node.attr in verbs:  # repo.git.reset(...)
                    found.append(f"{path.name}:{node.lineno}: git.{node.attr}")
                if node.attr == "index" and node.value.attr in ("repo", "_repo"):  # self.repo.index
                    found.append(f"{path.name}:{node.lineno}: repo.index")
            plain = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "repo"
            if plain and isinstance(node, ast.Attribute) and node.attr == "index":  # repo.index
                found.append(f"{path.name}:{node.lineno}: repo.index")
    assert found == []
