"""One error tree for the whole tool, and the exit codes it maps to.

Only the CLI maps errors (and verdicts) to exit codes, in one place (`cli.main`). Every error the
package raises derives from `GateError`; each subclass says which `ExitCode` it means, so a new error
type cannot forget to choose one. Messages are one line and name the file, node or field at fault.

Besides the errors' own codes, `cli.main` maps what is not a `GateError`: `OSError` (a report,
snapshot or bundle that cannot be written; a full disk) is ENVIRONMENT (4), any other exception is
INTERNAL (70, a bug: never 0 or 1, which would read as a verdict), SIGINT is INTERRUPTED (130) and
SIGTERM TERMINATED (143); on every one of those ways out the tools the command started are killed.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The CLI contract (docs/architecture.md): what each exit status means."""

    PASS = 0
    BLOCK = 1
    USAGE = 2
    BAD_INPUT = 3
    ENVIRONMENT = 4
    INTERNAL = 70  # an unexpected exception: a bug in upgrade-gate (BSD sysexits' EX_SOFTWARE)
    INTERRUPTED = 130  # SIGINT (128 + 2)
    TERMINATED = 143  # SIGTERM (128 + 15)


class GateError(Exception):
    """Root of every error upgrade-gate raises on purpose."""

    exit_code: ExitCode = ExitCode.ENVIRONMENT


class UsageError(GateError):
    """The command line itself is wrong (flags that contradict each other, a missing argument)."""

    exit_code = ExitCode.USAGE


class InputError(GateError):
    """A document or bundle given to the tool is unreadable, malformed or fails its schema."""

    exit_code = ExitCode.BAD_INPUT


class SchemaError(InputError):
    """A JSON/YAML document does not match its JSON Schema; the message names the file and field."""


class BundleError(InputError):
    """A capture bundle is corrupt or unsafe (path traversal, links, oversized members)."""


class ConfigError(InputError):
    """A configuration value (plan, policy, CVF ConfigMap key) is unknown or malformed."""


class ParseError(InputError):
    """A parser met output it cannot read by the format's rules.

    Parsers never guess: they return a complete value or raise this, naming the tool, the 1-based
    line number (0 when the whole text is at fault) and an excerpt of the offending line.
    """

    def __init__(self, tool: str, line_no: int, excerpt: str, message: str = "unexpected output") -> None:
        self.tool = tool
        self.line_no = line_no
        self.excerpt = excerpt[:120]
        self.message = message
        where = f"line {line_no}" if line_no else "output"
        super().__init__(f"{tool}: {message} at {where}: {self.excerpt!r}")


class EnvironmentFailure(GateError):
    """Something the tool needs from its environment is unreachable (store, API server, tool)."""

    exit_code = ExitCode.ENVIRONMENT


class StoreError(EnvironmentFailure):
    """The baseline store cannot be read or written (not a repo, concurrent writer, corrupt)."""


class StoreConflictError(StoreError):
    """Another save landed first; retry after reading the new head."""


class NotFoundError(InputError):
    """A named thing (node baseline, ref, file) does not exist."""
