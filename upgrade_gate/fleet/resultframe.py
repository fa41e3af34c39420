"""How a Job's result travels back: a checksummed frame in the pod log (and the in-pod wrapper).

Design decisions (why pod logs, not a ConfigMap per node)
- The API server already keeps every container's stdout; reading it needs only `get pods/log`, so the
  Jobs need no API credentials at all (`automountServiceAccountToken: false`) and the RBAC needs no
  ConfigMap writes. ConfigMaps are capped at 1 MiB and would need a cleanup protocol of their own.
- Logs are shared with stderr and with anything a tool prints, and the kubelet rotates them (default
  `containerLogMaxSize` 10 MiB). So the payload is wrapped: the wrapper (`fleet.framewrapper`, which a
  Job runs as `python3 -I -S -c <its source> -- ARGV...`; also `python -m upgrade_gate.fleet.resultframe
  -- ARGV...`) runs the real command, lets its stderr through as it comes, captures its stdout as bytes
  and prints, after the command ended, one frame:

      ==== upgrade-gate result v1 begin exit=0 bytes=1234 sha256=<hex of the payload>
      UGR <base64 of gzip(payload), 76 characters a line>
      ...
      ==== upgrade-gate result v1 end

  Because the frame is printed in one go after the command finished, no stderr line lands inside it;
  lines outside the frame are ignored. The reader takes the last complete frame and checks the length
  and SHA-256 of the decompressed payload, so a truncated or rotated log fails closed (ParseError,
  never a partial result). The payload is inflated no further than the length its header states, at
  most MAX_PAYLOAD_BYTES, so a gzip bomb in a pod log stops there. gzip keeps large captures (dmesg)
  well below the rotation size.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import re
import sys
import zlib
from collections.abc import Sequence
from pathlib import Path

from upgrade_gate.errors import ParseError
from upgrade_gate.fleet import framewrapper
from upgrade_gate.fleet.framewrapper import BEGIN, END, EXEC_FAILED, PREFIX, frame

__all__ = ["BEGIN", "END", "EXEC_FAILED", "PREFIX", "extract", "frame", "main", "wrapper_source"]

TOOL = "result-frame"
MAX_PAYLOAD_BYTES = 128 * 1024 * 1024
"""Largest payload a frame may carry (a capture bundle's members are at most 96 MiB in all, issue 26)."""
_BEGIN_RE = re.compile(rf"^{re.escape(BEGIN)} exit=(-?\d+) bytes=(\d+) sha256=([0-9a-f]{{64}})$")


def extract(log: str) -> tuple[bytes, int]:
    """(payload, exit code) of the last complete frame in a pod log; ParseError when there is none."""
    lines = log.splitlines()
    begins = [i for i, line in enumerate(lines) if line.startswith(BEGIN)]
    if not begins:
        raise ParseError(TOOL, 0, log[-120:], "no result frame in the pod log")
    start = begins[-1]
    head = _BEGIN_RE.match(lines[start])
    if head is None:
        raise ParseError(TOOL, start + 1, lines[start], "malformed frame header")
    chunks: list[str] = []
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if line == END:
            break
        if line.startswith(PREFIX):
            chunks.append(line[len(PREFIX) :])
    else:
        raise ParseError(TOOL, len(lines), lines[-1] if lines else "", "result frame is not terminated (log cut?)")
    exit_code, size, digest = int(head.group(1)), int(head.group(2)), head.group(3)
    if size > MAX_PAYLOAD_BYTES:  # refused before anything is inflated (a gzip bomb in a pod log)
        too_big = f"result frame over the {MAX_PAYLOAD_BYTES >> 20} MiB a result may have"
        raise ParseError(TOOL, start + 1, lines[start], too_big)
    try:  # inflated no further than the size the header states (+1 to see more): a bomb stops there
        payload = zlib.decompressobj(wbits=31).decompress(base64.b64decode("".join(chunks), validate=True), size + 1)
    except (ValueError, zlib.error) as exc:
        raise ParseError(TOOL, start + 1, lines[start], f"result frame does not decode: {exc}") from exc
    if len(payload) != size or hashlib.sha256(payload).hexdigest() != digest:
        raise ParseError(TOOL, start + 1, lines[start], "result frame checksum mismatch")
    return payload, exit_code


def main(argv: Sequence[str] | None = None) -> int:
    """In-pod wrapper (`python -m upgrade_gate.fleet.resultframe -- ARGV`): `fleet.framewrapper.main`."""
    return framewrapper.main(None if argv is None else list(argv))


@functools.cache
def wrapper_source() -> str:
    """The source of `fleet.framewrapper`, which a Job runs as `python3 -I -S -c SOURCE -- ARGV`: its module
    docstring (the design notes) left out of every Job, a line naming the file in its place."""
    text = Path(framewrapper.__file__).read_text(encoding="utf-8")
    first = ast.parse(text).body[0]
    lines = text.splitlines(keepends=True)
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and first.end_lineno is not None:
        lines = lines[first.end_lineno :]
    return "# upgrade-gate's result wrapper (upgrade_gate/fleet/framewrapper.py)\n" + "".join(lines).lstrip("\n")


if __name__ == "__main__":
    sys.exit(main())
