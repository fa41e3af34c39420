"""Immutable baseline tags (the trailer a tagged save writes, the check a read at a tag makes) and the
history of a baseline as people read it (`LogEntry`: the trailers left out, the tags on each commit).

A tagged save writes `Upgrade-Gate-Tag: TAG` into its commit message. Reading at a tag whose commit
lacks the trailer for that tag (moved with `git tag -f`, or made by hand) is refused (`MovedTagError`,
exit 3) unless the store allows it (`--allow-moved-tag`, UPGRADE_GATE_ALLOW_MOVED_TAG=1). A store whose
history has no trailer at all was written before the check existed: its tags are read as they are
(nothing can tell a moved one there); its first tagged save adopts them where they stand
(`Upgrade-Gate-Legacy-Tag: NAME SHA` lines), so from then on a moved old tag is refused too.

The trailer alone can be copied: a commit that upgrade-gate saved under the same tag name in another
store carries it too (brk14). `baseline save` only ever tags the commit it puts on the store's branch,
so a tag must also name the branch head or one of its ancestors (one `git merge-base --is-ancestor`
per tag read, cached per store object), in every store, with trailers or without. The tag's name is
resolved by `store.gitdir` (exactly `refs/tags/NAME`), never through gitpython's search order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import git  # store/__init__.py sets GIT_PYTHON_REFRESH=quiet first

from upgrade_gate.errors import ConfigError, InputError
from upgrade_gate.store.documents import iso_utc

TAG_TRAILER = "Upgrade-Gate-Tag"
LEGACY_TRAILER = "Upgrade-Gate-Legacy-Tag"  # a tag made before trailers existed, adopted as it stood
ALLOW_MOVED_TAG_ENV = "UPGRADE_GATE_ALLOW_MOVED_TAG"


@dataclass(frozen=True, slots=True, kw_only=True)
class LogEntry:
    """One commit that changed a node's baseline: sha, ISO 8601 UTC date, message, tags on it."""

    sha: str
    date: str
    message: str
    tags: tuple[str, ...] = ()


class TagExistsError(InputError):
    """The tag asked for already names another baseline (tags are immutable)."""


class MovedTagError(InputError):
    """A tag points at a commit upgrade-gate did not save under that tag (moved or made by hand)."""


def without_trailer(message: str) -> str:
    """A commit message as people wrote it: the tag trailers left out."""
    lines = [
        ln for ln in message.strip().splitlines() if not ln.startswith((f"{TAG_TRAILER}: ", f"{LEGACY_TRAILER}: "))
    ]
    return "\n".join(lines).strip()


def saved_under(commit: git.Commit, tag: str) -> bool:
    """True when the commit was saved under `tag` (it carries the tag's trailer)."""
    return f"{TAG_TRAILER}: {tag}" in str(commit.message).splitlines()


def any_trailer(repo: git.Repo, head: git.Commit | None) -> bool:
    """True once any commit of the store's branch carries a tag trailer (stores older than the check have
    none). Only the branch's history is searched: a baseline tag must name a commit in it (`check_tag`),
    and `git log --all` would open every ref file in the store."""
    if head is None:
        return False
    found = repo.git.log("-1", "--format=%H", f"--grep=^{TAG_TRAILER}: ", head.hexsha)
    return bool(found.strip())


def legacy_tags(repo: git.Repo, head: git.Commit | None) -> dict[str, str]:
    """Tags adopted by the first trailer-writing save (name -> commit sha), from the branch's history."""
    out: dict[str, str] = {}
    if head is None:
        return out
    text = repo.git.log("--format=%B", f"--grep=^{LEGACY_TRAILER}: ", head.hexsha)
    for line in text.splitlines():
        if line.startswith(f"{LEGACY_TRAILER}: "):
            name, _, sha = line.removeprefix(f"{LEGACY_TRAILER}: ").partition(" ")
            out.setdefault(name, sha)
    return out


def tagged_message(message: str, tag: str, *, adopted: Mapping[str, str] | None) -> str:
    """The message of a save tagged `tag`; the first trailer-writing save adopts the existing tags
    (`adopted`: tag name -> the commit it names; None once trailers are written)."""
    message = f"{message}\n\n{TAG_TRAILER}: {tag}"
    if adopted is not None:
        message = "\n".join([message, *sorted(f"{LEGACY_TRAILER}: {n} {sha}" for n, sha in adopted.items())])
    return message


def on_branch(repo: git.Repo, commit: git.Commit, head: git.Commit | None) -> bool:
    """True when `commit` is the branch head or one of its ancestors (`git merge-base --is-ancestor`)."""
    if head is None:
        return False
    return commit.hexsha == head.hexsha or repo.is_ancestor(commit, head)


def check_tag(
    repo: git.Repo,
    name: str,
    commit: git.Commit | None,
    *,
    branch: tuple[str | None, git.Commit | None],
    store: Path,
    trailers_written: bool,
) -> None:
    """Refuse reading the tag `name` (the commit it names, None when it names no commit) unless
    upgrade-gate saved that commit under it on the store's branch (`branch`: its name and head)."""
    if commit is None:  # a tag on a tree or blob: no baseline was ever saved under it
        raise MovedTagError(f"{store}: tag {name!r} does not name a commit; baselines are saved on commits")
    if not saved_under(commit, name) and trailers_written and legacy_tags(repo, branch[1]).get(name) != commit.hexsha:
        raise MovedTagError(
            f"{store}: tag {name!r} points at {commit.hexsha[:12]}, which upgrade-gate did not save under "
            f"that tag (moved with `git tag -f`, or made by hand); baselines are immutable. Restore the tag, or "
            f"pass --allow-moved-tag ({ALLOW_MOVED_TAG_ENV}=1) to read it anyway"
        )
    # Without trailers (a store saved before them) the trailer tells nothing; with one, it can be copied
    # from another store's commit (brk14): either way a tag `baseline save` made is on the store's branch.
    if not on_branch(repo, commit, branch[1]):
        where = f"{branch[0] or 'HEAD'} at {branch[1].hexsha[:12]}" if branch[1] is not None else "no commit yet"
        raise MovedTagError(
            f"{store}: tag {name!r} points at {commit.hexsha[:12]}, which is not in the history of the store's "
            f"branch ({where}): moved by hand, or copied from another store; baselines are immutable. Restore "
            f"the tag, or pass --allow-moved-tag ({ALLOW_MOVED_TAG_ENV}=1) to read it anyway"
        )


def moved_tag_allowed(value: str | None) -> bool:
    """UPGRADE_GATE_ALLOW_MOVED_TAG read strictly: `false` or `no` allowed a moved tag (any non-empty value
    but "0" did); a value that is neither yes nor no is refused (ConfigError, exit 3), not guessed."""
    if value is None:
        return False
    word = value.strip().lower()
    if word in ("", "0", "false", "no", "off"):
        return False
    if word in ("1", "true", "yes", "on"):
        return True
    raise ConfigError(f"{ALLOW_MOVED_TAG_ENV}={value[:40]!r}: expected 1, true or yes (allow) or 0, false or no")


def history(commits: Sequence[git.Commit], tags: Mapping[str, Sequence[str]]) -> tuple[LogEntry, ...]:
    """The commits as log entries, in the order given, with the tags on each (commit sha -> tag names)."""
    return tuple(
        LogEntry(
            sha=c.hexsha,
            date=iso_utc(c.committed_date),
            message=without_trailer(str(c.message)),
            tags=tuple(sorted(tags.get(c.hexsha, ()))),
        )
        for c in commits
    )
