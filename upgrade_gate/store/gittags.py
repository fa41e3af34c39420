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

from upgrade_gate.errors import InputError
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


def check_tag(repo: git.Repo, ref: str, commit: git.Commit, *, store: Path, trailers_written: bool) -> None:
    """Refuse a tag whose commit was not saved under it (see the module docstring)."""
    name = ref.removeprefix("refs/tags/")
    if f"refs/tags/{name}" not in {t.path for t in repo.tags}:
        return  # a branch or a commit sha: nothing was promised about it (a tag wins in rev-parse's order)
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
