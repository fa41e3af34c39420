"""Capture bundles: `manifest.json` plus the raw stdout/stderr of every probe, in a folder or a tarball.

A bundle is the evidence behind a snapshot. `write_bundle` writes it; `load_bundle` reads it back
(safely, in memory, see `collect.members`); `ReplayRunner` serves its recorded results through the
`CommandRunner` seam, so code that runs probes runs unchanged against a bundle.

Design decisions:
- Layout: `manifest.json` at the top and `probes/<name>.stdout` / `probes/<name>.stderr` beside it.
  Outputs are stored as UTF-8 bytes exactly as the runner decoded them (no newline translation), so a
  loaded bundle gives back equal `CommandResult`s, durations included (JSON floats round-trip).
- The manifest is validated against `schemas/manifest.schema.json` on write (catches our own bugs) and
  on read (names the file and field). On read, every file the manifest names must be present and every
  member must be named (or be a parent folder of a named file); anything else is refused.
- A directory is written into a temporary sibling and renamed into place, so a reader never sees half
  a bundle; an existing non-empty directory is never overwritten. A tarball is written to a temporary
  sibling and renamed over the target. Tarballs are reproducible: sorted members, mtime = taken_at,
  owner root, mode 0644.
- Write failures are `EnvironmentFailure` (exit 4): the node's disk, not the user's input, is at fault.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, cast

from upgrade_gate import docio, schemas
from upgrade_gate.collect.members import (
    DEFAULT_LIMITS,
    Admit,
    BundleFiles,
    BundleLimits,
    read_dir_files,
    read_tar_files,
)
from upgrade_gate.collect.probes import Probe, skipped_argv
from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import BundleError, EnvironmentFailure, InputError, NotFoundError
from upgrade_gate.model import NodeName

MANIFEST = "manifest.json"
MANIFEST_SCHEMA_VERSION = "1"
TARBALL_SUFFIXES = (".tar.gz", ".tgz")
NOT_IN_BUNDLE = "not in bundle"


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRecord:
    """One probe as captured: what it was, how it ended, and its raw output."""

    name: str
    parser: str
    required: bool
    timeout_s: float
    result: CommandResult
    fallback_for: tuple[str, ...] = ()  # the failed probes this fallback stood in for
    note: str | None = None  # why it was not run, or why a fallback was needed
    skipped: bool = False  # not run (no files matched): the result is empty and ok, `note` says why

    @property
    def ok(self) -> bool:
        """True when the command ran and exited 0 (or was rightly not run: no files matched)."""
        return self.result.ok

    @property
    def reason(self) -> str | None:
        """The failure reason, else the note, else None."""
        return self.result.failure_reason() or self.note

    def probe(self) -> Probe:
        """The probe as it ran (argv expanded, fallback_for as stood in for)."""
        return Probe(
            name=self.name,
            argv=self.result.argv,
            parser=self.parser,
            timeout_s=self.timeout_s,
            required=self.required,
            fallback_for=self.fallback_for,
            skip_reason=self.note if self.skipped else None,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Bundle:
    """A capture of one node: who, when, and every probe that ran, in capture order."""

    node: NodeName
    hostname: str | None
    taken_at: str  # ISO 8601 UTC
    tool_version: str
    host_root: str
    records: tuple[ProbeRecord, ...]

    def record(self, name: str) -> ProbeRecord | None:
        """The record of probe `name`, or None if it did not run (e.g. an unneeded fallback)."""
        return next((r for r in self.records if r.name == name), None)

    def probes(self) -> tuple[Probe, ...]:
        """The probes as they ran: `capture(ReplayRunner(b), probes=b.probes())` reproduces `b`."""
        return tuple(r.probe() for r in self.records)


class ReplayRunner:
    """A `CommandRunner` that answers each argv with the result recorded in a bundle."""

    def __init__(self, bundle: Bundle) -> None:
        self._results = {r.result.argv: r.result for r in bundle.records}

    def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """The recorded result for exactly `argv`; an argv not in the bundle is a missing result."""
        args = tuple(argv)
        recorded = self._results.get(args)
        if recorded is not None:
            return recorded
        return CommandResult(argv=args, returncode=None, stdout="", stderr=NOT_IN_BUNDLE, duration_s=0.0, missing=True)


# --------------------------------------------------------------------------- manifest


def _out_file(name: str, stream: str) -> str:
    return f"probes/{name}.{stream}"


def manifest_of(bundle: Bundle) -> dict[str, Any]:
    """The manifest document of `bundle` (schema-valid)."""
    data = {
        "schema_version": MANIFEST_SCHEMA_VERSION,
        "node": bundle.node,
        "hostname": bundle.hostname,
        "taken_at": bundle.taken_at,
        "tool_version": bundle.tool_version,
        "host_root": bundle.host_root,
        "probes": [
            {
                "name": r.name,
                "argv": list(r.result.argv),
                "parser": r.parser,
                "required": r.required,
                "timeout_s": r.timeout_s,
                "exit_code": r.result.returncode,
                "duration_s": r.result.duration_s,
                "timed_out": r.result.timed_out,
                "missing": r.result.missing,
                "stdout": _out_file(r.name, "stdout"),
                "stderr": _out_file(r.name, "stderr"),
                "fallback_for": list(r.fallback_for),
                "note": r.note,
                "skipped": r.skipped,
            }
            | ({"output_over": r.result.output_over} if r.result.output_over is not None else {})
            for r in bundle.records
        ],
    }
    schemas.validate("manifest", data, source=f"manifest of {bundle.node}")
    _check_unique(data, source=f"manifest of {bundle.node}")
    return data


def _check_unique(data: dict[str, Any], *, source: str) -> None:
    seen: set[str] = set()
    for i, probe in enumerate(data["probes"]):
        for key in ("name", "stdout", "stderr"):
            value = probe[key]
            token = value if key == "name" else f"file:{value}"
            if token in seen:
                raise BundleError(f"{source}: manifest: $.probes[{i}].{key}: duplicate {value!r}")
            seen.add(token)


def _manifest_data(raw: bytes, *, source: str) -> dict[str, Any]:
    manifest_src = f"{source}/{MANIFEST}"
    data = docio.parse_json(raw, source=manifest_src, error=BundleError)
    schemas.validate("manifest", data, source=manifest_src)
    _check_unique(data, source=manifest_src)
    _check_skipped(data, source=manifest_src)
    return cast(dict[str, Any], data)


def _named(data: dict[str, Any]) -> tuple[set[str], set[str]]:
    named = {MANIFEST} | {p[k] for p in data["probes"] for k in ("stdout", "stderr")}
    parents = {"."} | {"/".join(n.split("/")[:i]) for n in named for i in range(1, n.count("/") + 1)}
    return named, parents


def _admit(source: str) -> Admit:
    def admit(raw: bytes) -> tuple[frozenset[str], frozenset[str]]:
        named, parents = _named(_manifest_data(raw, source=source))
        return frozenset(named), frozenset(parents)

    return admit


def _check_skipped(data: dict[str, Any], *, source: str) -> None:
    """The manifest is not trusted: `skipped` only where the probe catalogue allows it.

    Only a file-read probe may be skipped, and only as capture skips one: its globs matched nothing,
    so its argv is the probe's bare command (no file appended), it did not run (exit 0, not timed out,
    not missing) and its output files are empty (checked in `_record`). A command probe marked skipped
    would hide its output.
    """
    file_probes = skipped_argv()
    for i, p in enumerate(data["probes"]):
        if not p["skipped"]:
            continue
        if p["name"] not in file_probes:
            raise BundleError(
                f"{source}: $.probes[{i}]: probe {p['name']!r} is marked skipped, but only a file-read probe "
                "whose globs matched nothing can be skipped: a forged or corrupt bundle"
            )
        if tuple(p["argv"]) != file_probes[p["name"]] or p["exit_code"] != 0 or p["timed_out"] or p["missing"]:
            raise BundleError(
                f"{source}: $.probes[{i}]: probe {p['name']!r} is marked skipped but has an argv or exit status "
                "of a probe that ran: a forged or corrupt bundle"
            )


def bundle_from_files(content: BundleFiles, *, source: str) -> Bundle:
    """Validate the manifest in `content` and build the Bundle; every member must be accounted for."""
    raw = content.files.get(MANIFEST)
    if raw is None:
        raise BundleError(f"{source}: no {MANIFEST} in bundle")
    data = _manifest_data(raw, source=source)
    named, parents = _named(data)
    for name in sorted(content.files):
        if name not in named:
            raise BundleError(f"{source}: refused member {name!r}: not named in the manifest")
    for name in sorted(content.dirs):
        if name not in parents:
            raise BundleError(f"{source}: refused member {name!r}: folder not named in the manifest")
    missing = sorted(named - set(content.files))
    if missing:
        raise BundleError(f"{source}: {missing[0]!r} is named in the manifest but missing from the bundle")
    files = dict(content.files)  # each member's bytes are dropped once decoded: peak memory ~ one copy
    records = tuple(_record(p, files, source=source) for p in data["probes"])
    return Bundle(
        node=NodeName(data["node"]),
        hostname=data["hostname"],
        taken_at=data["taken_at"],
        tool_version=data["tool_version"],
        host_root=data["host_root"],
        records=records,
    )


def _record(p: dict[str, Any], files: dict[str, bytes], *, source: str) -> ProbeRecord:
    # Tool output is evidence: never fail on a stray byte (same rule as LocalRunner).
    stdout, stderr = files.pop(p["stdout"]), files.pop(p["stderr"])
    if p["skipped"] and (stdout or stderr):
        raise BundleError(f"{source}: probe {p['name']!r} is marked skipped but has output: a forged or corrupt bundle")
    result = CommandResult(
        argv=tuple(p["argv"]),
        returncode=p["exit_code"],
        stdout=stdout.decode("utf-8", errors="replace"),
        stderr=stderr.decode("utf-8", errors="replace"),
        duration_s=float(p["duration_s"]),
        timed_out=p["timed_out"],
        missing=p["missing"],
        output_over=p.get("output_over"),
    )
    return ProbeRecord(
        name=p["name"],
        parser=p["parser"],
        required=p["required"],
        timeout_s=float(p["timeout_s"]),
        result=result,
        fallback_for=tuple(p["fallback_for"]),
        note=p["note"],
        skipped=p["skipped"],
    )


# --------------------------------------------------------------------------- read / write


def is_tarball_path(path: Path) -> bool:
    """True when `path` names a tarball bundle (.tar.gz / .tgz) rather than a folder."""
    return path.name.endswith(TARBALL_SUFFIXES)


def load_bundle(path: Path, *, limits: BundleLimits = DEFAULT_LIMITS) -> Bundle:
    """Read and validate the bundle at `path` (a folder or a tarball), without extracting anything."""
    if path.is_dir():
        content = read_dir_files(path, limits, admit=_admit(str(path)))
    elif path.is_file():
        content = read_tar_files(path, limits, admit=_admit(str(path)))
    elif path.exists():
        raise BundleError(f"{path}: not a bundle folder or tarball")
    else:
        raise NotFoundError(f"{path}: no such bundle")
    return bundle_from_files(content, source=str(path))


def bundle_payload(bundle: Bundle) -> dict[str, bytes]:
    """Every file of the bundle, by bundle-relative name."""
    manifest = manifest_of(bundle)
    payload = {MANIFEST: (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode("utf-8")}
    for r in bundle.records:
        payload[_out_file(r.name, "stdout")] = r.result.stdout.encode("utf-8", errors="replace")
        payload[_out_file(r.name, "stderr")] = r.result.stderr.encode("utf-8", errors="replace")
    return payload


def check_bundle_target(out: Path) -> None:
    """Raise EnvironmentFailure now if `write_bundle(..., out)` is bound to fail (before a long capture);
    InputError (exit 3) for a tarball path that is a link, a device, a FIFO or a socket (never replaced)."""
    if is_tarball_path(out) and not out.is_dir():
        from upgrade_gate.outpath import Action, action_for

        if action_for(out) not in (Action.CREATE, Action.REPLACE):
            raise InputError(f"{out}: not a regular file; a bundle is written to a new or regular file (- for stdout)")
    try:
        if is_tarball_path(out):
            problem = "is a folder" if out.is_dir() else None
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            problem = "exists and is not an empty folder"
        else:
            problem = None
    except OSError as exc:
        problem = exc.strerror or str(exc)
    if problem is not None:
        raise EnvironmentFailure(f"{out}: cannot write bundle: {problem}")


def write_bundle(bundle: Bundle, out: Path) -> Path:
    """Write `bundle` to `out` (a folder, or a tarball when it ends in .tar.gz/.tgz), atomically."""
    payload = bundle_payload(bundle)
    check_bundle_target(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if is_tarball_path(out):
            _write_tarball(payload, out, mtime=_epoch(bundle.taken_at))
        else:
            _write_dir(payload, out)
    except OSError as exc:
        raise EnvironmentFailure(f"{out}: cannot write bundle: {exc.strerror or exc}") from exc
    return out


def _write_dir(payload: dict[str, bytes], out: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        for name, data in sorted(payload.items()):
            target = tmp / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; a bundle folder is as readable as a tarball
        os.rename(tmp, out)  # replaces an empty folder; fails on a non-empty one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _write_tarball(payload: dict[str, bytes], out: Path, *, mtime: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=mtime) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for name, data in sorted(payload.items()):
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    info.mtime = mtime
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(data))
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _epoch(taken_at: str) -> int:
    try:
        return int(datetime.fromisoformat(taken_at.replace("Z", "+00:00")).timestamp())
    except ValueError:
        return 0
