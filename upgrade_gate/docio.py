"""The one reader of YAML and JSON documents: bounded, alias-free, and every number finite.

Every document upgrade-gate reads (plans, policies, checklists, CVF ConfigMaps, the dmesg pattern
table, manifests, snapshots, store documents) goes through this module, at two levels:

- `read_yaml(path)` / `read_json(path)` / `parse_yaml(text)` / `parse_json(data)`: read the file and
  parse it, every failure one line naming the file (and the line of a syntax error) as the caller's
  error class: a missing file is `NotFoundError`, an unreadable one `InputError`, a syntax error
  `ConfigError` for YAML (plans, policies, ConfigMaps are configuration) and `InputError` for JSON
  (snapshots, manifests are data) unless the caller names another (`BundleError` for a bundle).
  Each document kind's reader (`snapshot.io.load_snapshot`, `judge.plan.load_plan`,
  `judge.policy.load_policy`, `validate.config.load_cvf_config`, ...) is this plus its schema and decoder.
- `load_yaml` and `loads_json`, drop-in replacements for `yaml.safe_load` and `json.loads` that
  refuse what a hostile or broken document could use to hang the gate or switch a check off:

- YAML aliases (`*name`): an alias bomb ("billion laughs") is a few hundred bytes that expands to a
  structure JSON Schema validation then walks exponentially (a policy took over 60 s and 1.45 GB
  before it was killed). None of our documents needs an alias, so any alias is refused at the
  composer, before anything is built, as a `yaml.YAMLError` with its line (callers already turn
  those into "not YAML at line N").
- YAML documents over `MAX_YAML_BYTES` (PyYAML's pure-Python parser takes seconds per MiB); nesting
  deeper than Python's recursion limit (refused, not a crash).
- Files that are not documents: `read_bytes` never waits on a FIFO nobody writes to, refuses a
  folder, and stops reading at `MAX_DOCUMENT_BYTES` (or the caller's limit: a snapshot's is
  `snapshot.io.MAX_SNAPSHOT_BYTES`), so /dev/zero or a huge file is an error naming it, not a hang or
  an out-of-memory kill.
- Non-finite numbers: YAML's `.nan` / `.inf` and JSON's `NaN` / `Infinity` / `1e400`. A threshold of
  NaN compares false with everything, so a schema's `exclusiveMinimum` accepts it and a floor
  silently switches off. Refused as `ConfigError` (exit 3) naming the key path (`$.rules.x.min`).
- Duplicate keys (issue 26): YAML and JSON keep the last of two equal keys, so `severity: block`
  then `severity: warn` in one rule let a BIOS change pass. Refused (`ConfigError` for YAML,
  `InputError` for JSON; exit 3) with the key path and both lines (`dupkeys`). Each loader notices
  a duplicate as a mapping shorter than its node (no extra pass); `json.loads` by its pairs hook.
  YAML merge keys (`<<`, `!!merge`) are refused too: they exist to copy an anchor (refused above),
  and a merged key that an explicit one overrides is the same silent "last one wins".

Writing: `write_atomic(path, chunks)` / `write_text_atomic(path, text)` are the one atomic writer of
the documents the tool produces (snapshots, reports, metrics, pages): a temp file in the same folder,
fsync, rename, so a reader never sees half a file and a crash leaves the old file whole. What a path
may be is `outpath`'s decision: `-` is stdout, a device or FIFO is written through, a symlink, block
device, socket or folder is refused; only a regular file this user may write is renamed over.

Speed (issue 14: every `gate` reads the shipped policy and the dmesg pattern table): where PyYAML
has libyaml, a document is first scanned as a stream of events by libyaml's parser (no node is
built, nothing expands); one without an alias and nested at most `FAST_YAML_DEPTH` deep is then
loaded by `yaml.CSafeLoader` (libyaml's parser, the same resolver and safe constructor), ~6x faster
than the pure-Python loader. Anything else - an alias, deeper nesting, a syntax error - goes through
the pure-Python `_NoAliasLoader`, as does a document libyaml's loader refuses after the scan, so
refusals, their messages and their line numbers stay the pure-Python loader's own.

Design decision: this module sits at the bottom (it imports only `errors`, `dupkeys` and PyYAML), so
every stage can use it; it is the only place that constructs a YAML loader.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node

from upgrade_gate.dupkeys import Refused, UniqueKeys, yaml_path
from upgrade_gate.errors import ConfigError, InputError, NotFoundError

MAX_YAML_BYTES = 1024 * 1024
"""Largest YAML document read (plans, policies and ConfigMaps are a few KiB)."""
MAX_DOCUMENT_BYTES = 512 * 1024 * 1024
"""Largest document read from a file by default (a gate report of 8,192 nodes is ~100 MB)."""
_CHUNK = 64 * 1024
"""Bytes asked of each read of a pipe (its buffer's size), and of a file after its stated size."""
FAST_YAML_DEPTH = 64
"""Deepest nesting libyaml loads (ours are under 10); deeper documents take the pure-Python path."""
_MERGE = "tag:yaml.org,2002:merge"


_CSafeLoader: type[Any] | None = None
if yaml.__with_libyaml__:

    class _CUniqueLoader(UniqueKeys, yaml.CSafeLoader):
        """libyaml's safe loader with `UniqueKeys`; merge keys never reach it (`_plain_events`)."""

    _CSafeLoader = _CUniqueLoader


class _NoAliasLoader(UniqueKeys, yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases before they are resolved, and merge keys."""

    def flatten_mapping(self, node: MappingNode) -> None:
        for key_node, _ in node.value:
            if key_node.tag == _MERGE:
                where = yaml_path(self.ug_root or node, node)
                raise Refused(
                    f"merge key (<<) at line {key_node.start_mark.line + 1} ({where}); write the keys out in full"
                )
        super().flatten_mapping(node)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise ComposerError(
                None,
                None,
                f"YAML aliases are refused (*{event.anchor}); write the value out in full",
                event.start_mark,
            )
        node: Node | None = super().compose_node(parent, index)
        return node


def load_yaml(text: str, *, source: str = "document") -> Any:
    """Parse YAML like `yaml.safe_load`, refusing aliases, oversized or too deep documents, NaN/inf."""
    try:
        return _load_yaml(text, source=source, fast=_CSafeLoader is not None)
    except ValueError as exc:  # a scalar no Python value holds (an integer of over 4,300 digits), either loader
        raise ConfigError(f"{source}: a value that cannot be read: {str(exc)[:160]}") from None


def _load_yaml(text: str, *, source: str, fast: bool) -> Any:
    """`load_yaml`; `fast`: through libyaml where the document allows it (see the module docstring)."""
    if len(text) > MAX_YAML_BYTES:
        raise ConfigError(f"{source}: the document is over {MAX_YAML_BYTES // 1024} KiB; refused")
    if fast and _CSafeLoader is not None and _plain_events(text):
        loader = _CSafeLoader(text)
        try:
            data = loader.get_single_data()
        except yaml.YAMLError:  # refused after all (two documents, an unhashable key): the reference's words
            return _load_yaml(text, source=source, fast=False)
        except Refused as exc:
            raise ConfigError(f"{source}: {exc}") from None
        finally:
            loader.dispose()
        check_finite(data, source=source)
        return data
    loader = _NoAliasLoader(text)
    try:
        data = loader.get_single_data()
    except RecursionError:
        raise yaml.YAMLError(f"{source}: nested too deep") from None
    except Refused as exc:
        raise ConfigError(f"{source}: {exc}") from None
    finally:
        loader.dispose()
    check_finite(data, source=source)
    return data


def _plain_events(text: str) -> bool:
    """True when libyaml parses `text` without an error, an alias, a merge key (or any `<<`: only the
    pure-Python loader says where a merge key is) or nesting over FAST_YAML_DEPTH."""
    assert _CSafeLoader is not None
    loader = _CSafeLoader(text)
    depth = 0
    try:
        while (event := loader.get_event()) is not None:
            kind = type(event)
            if kind is yaml.SequenceStartEvent or kind is yaml.MappingStartEvent:
                depth += 1
                if depth > FAST_YAML_DEPTH:
                    return False
            elif kind is yaml.SequenceEndEvent or kind is yaml.MappingEndEvent:
                depth -= 1
            elif kind is AliasEvent or (kind is yaml.ScalarEvent and (event.value == "<<" or event.tag == _MERGE)):
                return False
    except yaml.YAMLError:
        return False
    finally:
        loader.dispose()
    return True


def _constant(name: str) -> float:
    raise ValueError(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(text)
    return value


class _KeyTwice(Exception):
    """An object named a key twice (`json.loads`'s pairs hook); the error path says where."""


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping = dict(pairs)
    if len(mapping) < len(pairs):
        raise _KeyTwice
    return mapping


def loads_json(text: str | bytes, *, source: str = "document") -> Any:
    """Parse JSON like `json.loads`; NaN, Infinity, overflowing numbers and a key named twice in one
    object are refused (InputError; a duplicate with its key path and both lines).

    Syntax errors still raise `json.JSONDecodeError`, so callers keep their own wording for them.
    """
    try:
        data = json.loads(text, parse_constant=_constant, parse_float=_finite_float, object_pairs_hook=_unique_pairs)
    except _KeyTwice:
        from upgrade_gate.dupkeys import json_duplicate

        found = json_duplicate(text)
        raise InputError(found.message(source) if found else f"{source}: a key is named twice") from None
    except RecursionError:
        raise InputError(f"{source}: nested too deep") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # NaN, Infinity, -Infinity, or a number that overflows (1e400)
        raise InputError(f"{source}: {exc} is not a finite number") from None
    return data


def check_finite(data: Any, *, source: str) -> None:
    """Raise ConfigError naming the key path of the first NaN or infinite number in `data`."""
    stack: list[tuple[Any, str]] = [(data, "$")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ConfigError(f"{source}: {path}: {value} is not a finite number")
        elif isinstance(value, dict):
            stack.extend((v, f"{path}.{k}") for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, f"{path}[{i}]") for i, v in reversed(list(enumerate(value))))


# --------------------------------------------------------------------------- files


def read_bytes(path: Path, *, limit: int = MAX_DOCUMENT_BYTES, follow: bool = True) -> bytes:
    """The bytes of `path`, at most `limit` of them; NotFoundError or InputError naming it.

    Opened without waiting (a FIFO nobody writes to reads as empty instead of blocking `open` forever),
    then read to its end; a pipe (`<(...)`, /dev/stdin) still works. A folder, or anything longer than
    `limit` (a huge file, /dev/zero), is refused before or while it is read, never read whole. With
    `follow=False` a symbolic link at `path` is refused too (files only the tool writes)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except OSError as exc:
        raise InputError(f"{path}: unreadable: {exc}") from exc
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise InputError(f"{path}: is a folder, not a file")
        if stat.S_ISREG(info.st_mode) and info.st_size > limit:
            raise InputError(f"{path}: {info.st_size} bytes, over the {_size(limit)} a document may have; refused")
        regular = stat.S_ISREG(info.st_mode)
        os.set_blocking(fd, regular)  # a pipe is waited on with a deadline (`_pipe_reader`), never forever
        chunks: list[bytes] = []
        total = 0
        # a regular file in one read of its size (+1 to see it grew), not into a 1 MiB buffer: ~100 ->
        # ~58 us for a 132 KB candidate read beside its decode (issue 14's fleet); pipes by 64 KiB
        want = info.st_size + 1 if regular else _CHUNK
        read = os.read if regular else _pipe_reader(path, time.monotonic() + PIPE_DEADLINE_S)
        while chunk := read(fd, min(want, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            want = _CHUNK
            if total > limit:
                raise InputError(f"{path}: over the {_size(limit)} a document may have; refused")
        if not total and not stat.S_ISREG(info.st_mode):
            raise InputError(f"{path}: nothing to read (a pipe or FIFO nobody wrote to)")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{path}: unreadable: {exc}") from exc
    finally:
        os.close(fd)


PIPE_DEADLINE_S = 120.0
"""Longest a pipe or FIFO given as a document is waited on, in all (`<(kubectl ...)` has that long to
write and close it): one whose writer held it open without writing blocked `gate --plan` forever
(2026-12-07)."""


def _pipe_reader(path: Path, deadline: float) -> Callable[[int, int], bytes]:
    """`os.read` of a non-blocking pipe that waits for data until `deadline`, then refuses (InputError)."""

    def read(fd: int, n: int) -> bytes:
        while True:
            try:
                return os.read(fd, n)
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([fd], [], [], left)[0]:
                    raise InputError(
                        f"{path}: a pipe or FIFO still open but not finished after {PIPE_DEADLINE_S:g} s; refused"
                    ) from None

    return read


def _size(n: int) -> str:
    return f"{n // (1024 * 1024)} MiB" if n >= 1024 * 1024 else f"{n} bytes"


def read_text(path: Path, *, limit: int = MAX_DOCUMENT_BYTES) -> str:
    """The UTF-8 text of `path`, at most `limit` bytes; NotFoundError or InputError naming it."""
    try:
        return read_bytes(path, limit=limit).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: unreadable: {exc}") from exc


def parse_yaml(text: str, *, source: str, error: type[InputError] = ConfigError, what: str = "YAML/JSON") -> Any:
    """`load_yaml`, a syntax error raised as `error` naming `source` and the line."""
    try:
        return load_yaml(text, source=source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{source}: not {what}{where}: {getattr(exc, 'problem', None) or exc}") from None


def read_yaml(path: Path, *, error: type[InputError] = ConfigError, what: str = "YAML/JSON") -> Any:
    """A YAML (or JSON) document file of at most MAX_YAML_BYTES, parsed (see `parse_yaml`)."""
    return parse_yaml(read_text(path, limit=MAX_YAML_BYTES), source=str(path), error=error, what=what)


def parse_json(data: str | bytes, *, source: str, error: type[InputError] = InputError) -> Any:
    """`loads_json`, every failure (not UTF-8, syntax with its line, NaN) raised as `error` naming `source`."""
    try:
        return loads_json(data.decode("utf-8") if isinstance(data, bytes) else data, source=source)
    except UnicodeDecodeError as exc:
        raise error(f"{source}: not UTF-8: {exc.reason} at byte {exc.start}") from exc
    except json.JSONDecodeError as exc:
        raise error(f"{source}: not JSON: {exc.msg} at line {exc.lineno}") from exc
    except InputError as exc:
        if isinstance(exc, error):
            raise
        raise error(str(exc)) from exc


def read_json(path: Path, *, error: type[InputError] = InputError) -> Any:
    """A JSON document file, parsed (see `parse_json`)."""
    return parse_json(read_bytes(path), source=str(path), error=error)


def write_atomic(path: Path, chunks: Iterable[bytes]) -> None:
    """Write `chunks` to `path` as `outpath.decide` allows: `-` to stdout, a character device or FIFO
    written through, anything else via a temp file in the same folder, fsync and rename (0644); a
    symlink, block device, socket or folder is refused (InputError). An OSError of the write names
    the path (the CLI's exit 4)."""
    from upgrade_gate import outpath

    action = outpath.action_for(path)
    if action is outpath.Action.STDOUT or action is outpath.Action.STDERR:
        _write_stream(path, action is outpath.Action.STDOUT, chunks)
    elif action is outpath.Action.THROUGH:
        with _naming(path):
            fh = os.fdopen(outpath.open_through(path), "wb")
        try:
            _copy(path, chunks, fh)  # flushed: nothing is left for close to fail on
        finally:
            with contextlib.suppress(OSError):
                fh.close()
    else:
        _write_renamed(path, chunks)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """An OSError of writing `path` that names no file (a write, a flush) re-raised naming it, so the
    CLI's one line says which output failed (`/dev/full: No space left on device`, exit 4)."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, str(path)) from exc


def _copy(path: Path, chunks: Iterable[bytes], fh: Any) -> None:
    for chunk in chunks:
        with _naming(path):
            fh.write(chunk)
    with _naming(path):
        fh.flush()


def _write_stream(path: Path, stdout: bool, chunks: Iterable[bytes]) -> None:
    import sys

    stream = sys.stdout if stdout else sys.stderr
    with _naming(path):
        stream.flush()  # what the command printed before comes first
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        _copy(path, chunks, buffer)
        return
    for chunk in chunks:  # a stream without bytes (a test's capture)
        with _naming(path):
            stream.write(chunk.decode("utf-8"))
    with _naming(path):
        stream.flush()


def _write_renamed(path: Path, chunks: Iterable[bytes]) -> None:
    import tempfile  # ~5 ms (random, shutil): not on every command's start-up, only where one writes

    with _naming(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with _naming(path):
            os.fchmod(fd, 0o644)  # mkstemp makes 0600; reports and snapshots are meant to be shared
        with os.fdopen(fd, "wb") as fh:
            _copy(path, chunks, fh)
            with _naming(path):
                os.fsync(fh.fileno())
        with _naming(path):
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """`write_atomic` of one UTF-8 text."""
    write_atomic(path, (text.encode("utf-8"),))
