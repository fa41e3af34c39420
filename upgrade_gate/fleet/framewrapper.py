"""The in-pod result wrapper (`fleet.resultframe`), standard library only: a Job sends it as its source.

A Job's container runs `python3 -I -S -c <this file> -- ARGV...` (`manifests.JobSpec.command`): the
interpreter starts isolated and without `site`, so the image needs only a Python 3.11+ and nothing it
imports is ours. It runs ARGV with stdin from /dev/null, lets its stderr through as it comes, and prints
its stdout afterwards as one checksummed frame (format and reader: `fleet.resultframe`).

Design decisions
- (issue 14) Start-up is on every Job's path, on the node, in sequence with the tool: measured on the
  bench machine, `python -m upgrade_gate.fleet.resultframe` took 76-151 ms (site, the package's
  finder, `upgrade_gate`, then `subprocess`, `gzip`, `base64`), this file ~20-45 ms. So it imports only
  builtins and `os`/`hashlib`: `os.posix_spawnp` and a pipe instead of `subprocess` (exec errors are
  still raised in the wrapper: glibc's posix_spawn reports them), `zlib` with a gzip header (wbits 31)
  instead of `gzip`, `binascii` instead of `base64`. The bytes framed are the same gzip stream format
  (`gzip.decompress` reads both); the reader checks the decompressed payload's length and SHA-256.
- Kubernetes expands variable references (a dollar sign, then VAR in parentheses) in a container's
  arguments, so this source must not contain one (tests check it).
"""

from __future__ import annotations

import binascii
import hashlib
import os
import sys
import zlib

BEGIN = "==== upgrade-gate result v1 begin"
END = "==== upgrade-gate result v1 end"
PREFIX = "UGR "
EXEC_FAILED = "upgrade-gate result wrapper: cannot run"


def frame(payload: bytes, *, exit_code: int = 0) -> str:
    """The frame text for `payload` (ends with a newline)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip header and trailer (mtime 0)
    packed = binascii.b2a_base64(packer.compress(payload) + packer.flush(), newline=False).decode("ascii")
    lines = [f"{BEGIN} exit={exit_code} bytes={len(payload)} sha256={hashlib.sha256(payload).hexdigest()}"]
    lines.extend(PREFIX + packed[i : i + 76] for i in range(0, len(packed), 76))
    lines.append(END)
    return "\n".join(lines) + "\n"


def run(args: list[str]) -> tuple[bytes, int]:
    """Run `args` (PATH searched), stdin /dev/null, stderr inherited; (its stdout, its exit code).

    The exit code is the command's, or minus the signal that killed it (as `subprocess` reports it).
    OSError when it cannot be executed."""
    read_end, write_end = os.pipe()
    try:
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, write_end, 1),
            (os.POSIX_SPAWN_CLOSE, read_end),
        ]
        pid = os.posix_spawnp(args[0], args, os.environ, file_actions=actions)
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    chunks = []
    with open(read_end, "rb", buffering=0) as out:
        while chunk := out.read(1 << 16):
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    return b"".join(chunks), os.waitstatus_to_exitcode(status)


def main(argv: list[str] | None = None) -> int:
    """Run ARGV (after `--`), pass stderr through, print stdout as a frame; the command's exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        print("usage: python -m upgrade_gate.fleet.resultframe -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    try:
        stdout, code = run(args)
    except OSError as exc:
        print(f"{EXEC_FAILED} {args[0]}: {exc}", file=sys.stderr)
        return 127
    sys.stderr.flush()
    sys.stdout.write(frame(stdout, exit_code=code))
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
