"""Immutable baseline tags (the trailer a tagged save writes, the check a read at a tag makes) and the
history of a baseline as people read it (`LogEntry`: the trailers left out, the tags on each commit).

A tagged save writes `Upgrade-Gate-Tag: TAG` into its commit message. Reading at a tag whose commit
lacks the trailer for that tag (moved with `git tag -f`, or made by hand) is refused (`MovedTagError`,
exit 3) unless the store allows it (`--allow-moved-tag`, UPGRADE_GATE_ALLOW_MOVED_TAG=1). A store whose
history has no trailer at all was written before the check existed: its tags are read as they are
(nothing can tell a moved one there); its first tagged save adopts them where they stand
(`Upgrade-Gate-Legacy-Tag: NAME SHA` lines), so from then on a moved old tag is refused too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import git  # store/__init__.py sets GIT_PYTHON_REFRESH=quiet first
from git.repo.fun import name_to_object

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


def any_trailer(repo: git.Repo) -> bool:
    """True once any commit of the store carries a tag trailer (stores older than the check have none)."""
    found = repo.git.log("--all", "-1", "--format=%H", f"--grep=^{TAG_TRAILER}: ")
    return bool(found.strip())


def tags_by_commit(repo: git.Repo) -> dict[str, list[str]]:
    """commit sha -> the names of the tags on it (a tag on a tree or blob names no baseline: left out)."""
    tags: dict[str, list[str]] = {}
    for tag in repo.tags:
        try:
            tags.setdefault(tag.commit.hexsha, []).append(tag.name)
        except ValueError:
            continue
    return tags


def legacy_tags(repo: git.Repo) -> dict[str, str]:
    """Tags adopted by the first trailer-writing save (name -> commit sha)."""
    out: dict[str, str] = {}
    text = repo.git.log("--all", "--format=%B", f"--grep=^{LEGACY_TRAILER}: ")
    for line in text.splitlines():
        if line.startswith(f"{LEGACY_TRAILER}: "):
            name, _, sha = line.removeprefix(f"{LEGACY_TRAILER}: ").partition(" ")
            out.setdefault(name, sha)
    return out


def tagged_message(repo: git.Repo, message: str, tag: str, *, trailers_written: bool) -> str:
    """The message of a save tagged `tag`; the first trailer-writing save adopts the existing tags."""
    message = f"{message}\n\n{TAG_TRAILER}: {tag}"
    if not trailers_written:
        adopted = sorted(f"{LEGACY_TRAILER}: {t.name} {t.commit.hexsha}" for t in repo.tags)
        message = "\n".join([message, *adopted])
    return message


def tag_named(repo: git.Repo, ref: str) -> git.TagReference | None:
    """The tag a ref expression reads, or None (a branch, a commit sha).

    Resolved as the store's reader resolves it (gitpython's `rev_parse`): the name before the first
    operator (`~`, `^`, `:`, `@`) is looked up in git's order (`NAME`, `refs/NAME`, `refs/tags/NAME`,
    `refs/heads/NAME`, ...). So `rocm-6.1.3`, `tags/rocm-6.1.3`, `refs/tags/rocm-6.1.3`, `rocm-6.1.3~0` and
    `rocm-6.1.3^{commit}` all name the tag: only the bare name and `refs/tags/NAME` were checked, and a
    moved tag read as `tags/NAME` passed (break test, 2026-12-07).
    """
    cut = min((i for i in (ref.find(c) for c in "~^:@") if i >= 0), default=len(ref))
    base = ref[:cut]
    if not base:
        return None
    try:
        found = name_to_object(repo, base, return_ref=True)
    except (ValueError, git.BadName, git.BadObject):  # gitdb's, as gitpython re-exports them
        return None  # a commit sha (or nothing: the read itself says so)
    path = str(found.path) if isinstance(found, git.SymbolicReference) else ""
    if not path.startswith("refs/tags/"):
        return None  # a branch or HEAD: nothing was promised about it (a tag wins in rev-parse's order)
    return git.TagReference(repo, path)


def check_tag(repo: git.Repo, ref: str, *, store: Path, trailers_written: bool) -> None:
    """Refuse a ref that reads a tag whose commit was not saved under it (see the module docstring)."""
    tag = tag_named(repo, ref)
    if tag is None:
        return
    name = str(tag.path).removeprefix("refs/tags/")
    try:
        commit = tag.commit
    except ValueError:  # a tag on a tree or blob: no baseline was ever saved under it
        raise MovedTagError(f"{store}: tag {name!r} does not name a commit; baselines are saved on commits") from None
    if saved_under(commit, name):
        return
    if not trailers_written:
        return  # a store saved before tags carried the trailer: its tags cannot be checked (README)
    if legacy_tags(repo).get(name) == commit.hexsha:
        return  # adopted where it stood by the first save that wrote trailers
    raise MovedTagError(
        f"{store}: tag {name!r} points at {commit.hexsha[:12]}, which upgrade-gate did not save under "
        f"that tag (moved with `git tag -f`, or made by hand); baselines are immutable. Restore the tag, or "
        f"pass --allow-moved-tag ({ALLOW_MOVED_TAG_ENV}=1) to read it anyway"
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


def history(repo: git.Repo, commits: Sequence[git.Commit]) -> tuple[LogEntry, ...]:
    """The commits as log entries, in the order given, with the tags on each."""
    tags = tags_by_commit(repo)
    return tuple(
        LogEntry(
            sha=c.hexsha,
            date=iso_utc(c.committed_date),
            message=without_trailer(str(c.message)),
            tags=tuple(sorted(tags.get(c.hexsha, ()))),
        )
        for c in commits
    )
