"""The store is inert data: how every git process the store starts is kept from executing anything the
repository (or a config file beside it) names (issue 26).

A baseline store is handed to the tool like any input: a clone from a shared remote, a folder another
team prepared. Git runs programs named by configuration and by files in the repository (hooks,
`core.fsmonitor`, filter/diff/merge drivers, pagers, editors, credential helpers, signing programs) and
reads objects from places the repository names (alternates, replace refs). None of that may happen
because of what a store holds, so the library sets it itself on every git command, rather than
trusting the store's `.git/config`:

- `-c` settings (`SAFE_CONFIG`): command-line configuration outranks every config file (system,
  global, the repository's, its includes), so these hold whatever the store's config says.
- Environment (`safe_env`): system and global config are not read at all (a store must not work
  differently per machine, and `init.templateDir` there could plant hooks); `GIT_DIR`,
  `GIT_WORK_TREE`, `GIT_INDEX_FILE` and `GIT_OBJECT_DIRECTORY` name this store, so neither
  `core.worktree` in its config nor a `GIT_DIR` inherited from the caller (a hook of another
  repository) redirects a git command; replace refs and grafts are ignored, prompts are off.
- Commands that would apply attributes (filters, textconv) are not run at all: the store writes its
  working tree and index itself (`store.worktree`, `git update-index --index-info`, which copies
  entries without reading files), never `git checkout`, `reset`, `add` or `status`. Commits are built
  in-process (`store.gitobjects`), never by `git commit` or gitpython's `IndexFile.commit`, which runs
  the commit hooks through gitpython's own `run_commit_hook`.
- What settings cannot switch off is refused when the store is opened (`refusal`): an alternates file
  (objects read from outside the store) is a StoreError naming it.

This module imports no git: `store.gitstore` applies it to the gitpython command object it opens.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

# A hooks folder that cannot hold a hook: git looks for `/dev/null/<hook>`, which never exists.
NO_HOOKS = os.devnull

SAFE_CONFIG: tuple[str, ...] = (
    f"core.hooksPath={NO_HOOKS}",  # .git/hooks/* and any core.hooksPath: reference-transaction, post-index-change...
    "core.fsmonitor=false",  # a program (or hook) git would run on every index read
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "core.pager=cat",
    "pager.log=false",
    "core.editor=:",  # ":" is git's "no editor"
    "sequence.editor=:",
    "core.askPass=",
    "credential.helper=",  # an empty value resets the list of helpers
    "core.attributesFile=" + os.devnull,
    "diff.external=",
    "log.showSignature=false",  # else `git log` runs gpg.program on signed commits
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "core.useReplaceRefs=false",  # refs/replace/* would substitute objects
    "protocol.allow=never",  # no transport at all: no ssh (core.sshCommand), no remote helpers, no proxy
    "gc.auto=0",  # no automatic `git gc` (nor its pre-auto-gc hook)
    "maintenance.auto=false",
    "color.ui=false",
)

# Read by the store's own code where it checks what it will not follow.
ALTERNATES = ("objects/info/alternates", "objects/info/http-alternates")


class GitCommand(Protocol):
    """The part of gitpython's `git.Git` command object the store configures."""

    def set_persistent_git_options(self, **kwargs: Any) -> None: ...

    def update_environment(self, **kwargs: Any) -> dict[str, str | None]: ...


def safe_env(git_dir: Path, work_tree: Path | None, objects: Path | None = None) -> dict[str, str]:
    """Environment for every git process run on the store at `git_dir` (see the module docstring);
    `objects` is its object folder when not `git_dir/objects` (a linked worktree's common folder)."""
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_DIR": str(git_dir),
        "GIT_INDEX_FILE": str(git_dir / "index"),
        "GIT_OBJECT_DIRECTORY": str(objects or git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": "",
        "GIT_NO_REPLACE_OBJECTS": "1",
        "GIT_GRAFT_FILE": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ASKPASS": "",
        "SSH_ASKPASS": "",
        "GIT_PAGER": "cat",
        "PAGER": "cat",
        "GIT_EDITOR": ":",
        "GIT_SEQUENCE_EDITOR": ":",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    if work_tree is not None:
        env["GIT_WORK_TREE"] = str(work_tree)
    return env


def harden(cmd: GitCommand, git_dir: Path, work_tree: Path | None, objects: Path | None = None) -> None:
    """Make every later command of `cmd` run with `SAFE_CONFIG` and `safe_env`."""
    cmd.set_persistent_git_options(c=list(SAFE_CONFIG))
    cmd.update_environment(**safe_env(git_dir, work_tree, objects))


# Inherited variables that would point `git init` at another repository or work tree.
_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR")


def init_command(git: str, path: Path) -> tuple[list[str], dict[str, str]]:
    """argv and environment of `git init` for a new store: no template (one could hold hooks), no
    system or global config, `SAFE_CONFIG`, and no inherited location variable."""
    argv = [git]
    for setting in SAFE_CONFIG:
        argv += ["-c", setting]
    env = {k: v for k, v in os.environ.items() if k not in _LOCATION_VARS}
    env.update({k: v for k, v in safe_env(path / ".git", None).items() if k not in _LOCATION_VARS})
    return [*argv, "init", "-q", "--template=", str(path)], env


def refusal(common_dir: Path, store: Path) -> str | None:
    """Why the store cannot be read safely (a one-line reason), or None. An alternates file makes git
    read objects from another folder, which no setting can switch off."""
    for rel in ALTERNATES:
        file = common_dir / rel
        if file.exists() or file.is_symlink():
            return (
                f"{store}: {file} borrows objects from outside the store, which upgrade-gate does not read; "
                "make the store hold its own objects (`git repack -a -d`, then remove that file)"
            )
    return None
