"""Load the shipped JSON Schemas and validate documents against them.

The schemas live once, in the repository's top-level `schemas/` folder, which the wheel ships inside
the package (`upgrade_gate.shipped` finds it either way). Validators are compiled once per process.
Errors name the file and the JSON path of the first failing field, on one line.

Two validators, one answer: fastjsonschema compiles each schema to Python code and checks a full
8-GPU snapshot in ~1.5 ms (jsonschema takes ~40 ms, which is minutes for an 8,192-node fleet). Only
when a document fails is jsonschema run as well, for its precise message and path. If the two ever
disagree, the document is rejected with fastjsonschema's message: never accepted on a tie.

Compiling a schema costs 2-200 ms (fastjsonschema writes Python source, then Python compiles it;
the ten shipped schemas take ~0.45 s, the snapshot's alone ~0.19 s, against ~5 ms for all ten from
the cache: docs/caches.md). The compiled code is kept in the user's cache folder
(`$XDG_CACHE_HOME/upgrade-gate/validators`, else `~/.cache/...`) under a name derived from the
schema's text, fastjsonschema's version and Python's bytecode tag, so a changed schema or upgrade
never reads a stale entry; `UPGRADE_GATE_NO_CACHE=1`, or a folder that cannot be written, compiles
every time. An entry that does not load is compiled again.

An entry is code that `validate` runs (issue 26: caches are never trusted by location). It is sealed
with a MAC keyed by this user's secret (`cachekey`) over the schema's name, the entry's name and the
code, and run only when the MAC checks out: an entry anyone else wrote (a forged validator that
accepts everything, in a shared or group-writable cache folder, or planted in this user's own) is
compiled afresh, never run. The MAC is checked on the bytes read, and those same bytes are loaded,
so nothing can be swapped in between. Entries are still written 0600 in a 0700 folder, but their
safety no longer rests on it; a refused key (`cachekey.refusal`) compiles every time.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import itertools
import json
import marshal
import os
import sys
from pathlib import Path
from typing import Any

from upgrade_gate import cachekey, shipped
from upgrade_gate.errors import GateError, SchemaError


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Return the parsed schema `name` (e.g. "snapshot") from the shipped `schemas/` folder."""
    ref = shipped.folder("schemas") / f"{name}.schema.json"
    try:
        data: dict[str, Any] = json.loads(ref.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:  # a packaging bug, not user input
        raise RuntimeError(f"schema {name!r} is not shipped with the package") from exc
    return data


@functools.cache
def _validator(name: str) -> Any:
    import jsonschema

    schema = load_schema(name)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


NO_CACHE_ENV = "UPGRADE_GATE_NO_CACHE"


@functools.cache
def _fast_validator(name: str) -> Any:
    import fastjsonschema

    # fastjsonschema rewrites every "$ref" of the schema it is given into an absolute URL, in place: it
    # gets its own copy, or load_schema's (cached, shared) answer changes under every later reader.
    schema = copy.deepcopy(load_schema(name))
    folder = _cache_folder()
    key = cachekey.user_key() if folder is not None else None
    if folder is None or key is None:
        return fastjsonschema.compile(schema)
    text = json.dumps(schema, sort_keys=True).encode("utf-8")
    digest = hashlib.sha256(text + fastjsonschema.VERSION.encode() + sys.implementation.cache_tag.encode())
    path = folder / f"{name}-{digest.hexdigest()[:32]}.{ENTRY_SUFFIX}"
    found = _cached(path, key)
    if found is not None:
        return found
    resolver, generator = fastjsonschema._factory(schema, handlers={})  # what fastjsonschema.compile does
    source = generator.global_state_code + "\n" + generator.func_code
    code = compile(source, f"<validator {name}>", "exec")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    entry = resolver.get_scope_name()
    data = marshal.dumps((entry, code))
    _keep(path, ENTRY_MAGIC + key.mac(PURPOSE, path.name.encode(), data) + data)
    return namespace[entry]


ENTRY_SUFFIX = "v2"  # v2: sealed with the user's key (`.bin` entries were trusted by the folder's permissions)
ENTRY_MAGIC = b"UGV2"
PURPOSE = b"ug-validator"  # the MAC's personalisation: an entry of another cache never runs here
MAX_ENTRY_BYTES = 16 * 1024 * 1024  # an entry read at all (the snapshot's is ~340 KB)
_HEADER = len(ENTRY_MAGIC) + cachekey.MAC_BYTES


def _cached(path: Path, key: cachekey.CacheKey) -> Any:
    """The validator kept at `path`, or None (compile it) unless the entry is sealed with this user's key."""
    from upgrade_gate.docio import read_bytes  # PyYAML with it: only when a cache is read

    try:
        data = read_bytes(path, limit=MAX_ENTRY_BYTES, follow=False)
    except GateError:  # absent, a link, a folder, oversized, unreadable
        return None
    body = memoryview(data)[_HEADER:]
    if data[: len(ENTRY_MAGIC)] != ENTRY_MAGIC or not key.verify(
        memoryview(data)[len(ENTRY_MAGIC) : _HEADER], PURPOSE, path.name.encode(), body
    ):
        return None  # not written by this user's runs: never run
    try:
        entry, code = marshal.loads(body)
        namespace: dict[str, Any] = {}
        exec(code, namespace)  # sealed by this user's key: code this user's own run compiled
        return namespace[entry]
    except Exception:  # sealed, yet does not load (another Python build): compile (and keep) it afresh
        return None


def _cache_folder() -> Path | None:
    if os.environ.get(NO_CACHE_ENV, "") not in ("", "0"):
        return None
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "upgrade-gate" / "validators"


def _keep(path: Path, data: bytes) -> None:
    """Write a cache entry atomically (a temp file, then rename), private to this user; any failure
    only costs speed."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError:
        pass


def validate(name: str, document: Any, *, source: str) -> None:
    """Raise SchemaError naming `source` and the failing path if `document` breaks schema `name`."""
    import fastjsonschema

    try:
        _fast_validator(name)(document)
        return
    except fastjsonschema.JsonSchemaValueException as exc:
        fast_message = str(exc)
        if exc.rule in _SIZE_RULES or _node_count(document) > JSONSCHEMA_MAX_NODES:
            # A size limit, or a document too big to walk again: fastjsonschema's answer is enough
            # (jsonschema would validate all 10,008 GPUs of a hostile snapshot before reporting).
            parts = (exc.path or [])[1:]
            fast_path = "".join(f"[{p}]" if isinstance(p, int) or str(p).isdigit() else f".{p}" for p in parts)
            detail = (exc.message or fast_message).removeprefix(str(exc.name or "data")).strip()
            raise SchemaError(f"{source}: {name} schema: {_short('$' + fast_path)}: {_short(detail)}") from None
    except fastjsonschema.JsonSchemaException as exc:
        fast_message = str(exc)
    validator = _validator(name)
    # At most the first 100 errors, and messages cut short: a hostile document must not make the
    # error itself expensive (jsonschema renders the whole failing instance into its message).
    errors = itertools.islice(validator.iter_errors(document), 100)
    error = next(iter(sorted(errors, key=lambda e: [str(p) for p in e.absolute_path])), None)
    if error is None:
        raise SchemaError(f"{source}: {name} schema: {_short(fast_message)}")
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    raise SchemaError(f"{source}: {name} schema: {_short('$' + path)}: {_short(error.message)}")


_SIZE_RULES = frozenset({"maxItems", "maxLength", "maxProperties", "maximum", "exclusiveMaximum"})

JSONSCHEMA_MAX_NODES = 100_000
"""Past this many values, a failing document is not walked again by jsonschema (seconds per 10k GPUs)."""


def _node_count(document: Any, limit: int = JSONSCHEMA_MAX_NODES) -> int:
    """How many values `document` holds, counting stops just past `limit`."""
    count, stack = 0, [document]
    while stack and count <= limit:
        value = stack.pop()
        count += 1
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return count


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[: limit - 20]}... ({len(text)} characters)"


def schema_names() -> tuple[str, ...]:
    """Names of every shipped schema."""
    folder = shipped.folder("schemas")
    return tuple(
        sorted(p.name.removesuffix(".schema.json") for p in folder.iterdir() if p.name.endswith(".schema.json"))
    )


if __name__ == "__main__":  # python -m upgrade_gate.schemas --write | --check (see upgrade_gate.schemagen)
    import sys

    from upgrade_gate.schemagen import main

    sys.exit(main(sys.argv[1:]))
