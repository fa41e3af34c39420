"""CLI cold start: `upgrade-gate --help` and `upgrade-gate gate --help` in fresh processes.

Design decisions
- Each run is a fresh interpreter started through the installed console script, as a user runs it;
  the first run is a warm-up (page cache), the median of the rest is reported, next to a bare
  `python -c pass` so the interpreter's own start-up is visible as the floor.
- `python -X importtime` is parsed into a tree so the report can name, for each heavy library
  (kubernetes, git, deepdiff, scipy, matplotlib, jsonschema, numpy, rich, yaml), whether `--help`
  imports it and through which chain of modules - the thing the owner of that chain has to change.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import PYTHON, REPO, Section, Target, Timing, fmt_s, print_section, table, timing_cell

TARGET_S = 0.3
HEAVY = ("kubernetes", "git", "deepdiff", "scipy", "matplotlib", "jsonschema", "numpy", "pydantic", "rich", "yaml")
# Must not be imported by --help (issue 7); rich, yaml and pydantic are reported but not judged.
FORBIDDEN = ("kubernetes", "git", "deepdiff", "scipy", "matplotlib", "jsonschema")
COMMANDS: tuple[tuple[str, ...], ...] = (("--help",), ("gate", "--help"))


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportLine:
    """One line of `-X importtime`: a module, its depth, self and cumulative time (µs)."""

    name: str
    depth: int
    self_us: int
    cumulative_us: int
    order: int


def cli_argv() -> list[str]:
    """The console script next to this interpreter, or `python -m upgrade_gate`."""
    script = Path(PYTHON).parent / "upgrade-gate"
    return [str(script)] if script.exists() else [PYTHON, "-m", "upgrade_gate"]


def child_env(*, bytecode: bool, cache_dir: Path) -> dict[str, str]:
    """The environment of a timed child: with a bytecode cache (kept out of the tree) or without one.

    This sandbox exports PYTHONDONTWRITEBYTECODE=1, so every start would recompile the package from
    source; an installed tool has its .pyc files. Both are measured; the cached one is the target.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHONPYCACHE")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if bytecode:
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(cache_dir / "never-written")
    return env


def time_process(argv: list[str], *, repeat: int, env: dict[str, str] | None = None) -> tuple[Timing, Timing]:
    """Wall and CPU (user+sys) times of `argv` in fresh processes, after one untimed warm-up run.

    CPU time is reported beside wall time because it is far less sensitive to other processes on a
    shared machine: it only counts while the child runs.
    """
    wall: list[float] = []
    cpu: list[float] = []
    for i in range(repeat + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, cwd=REPO, capture_output=True, check=False, env=env)
        elapsed = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if i:
            wall.append(elapsed)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    label = " ".join(argv)
    return Timing(label=label, runs=tuple(wall)), Timing(label=label + " (cpu)", runs=tuple(cpu))


def parse_importtime(stderr: str) -> list[ImportLine]:
    """The `import time:` lines of `-X importtime` output, in order."""
    out: list[ImportLine] = []
    for raw in stderr.splitlines():
        if not raw.startswith("import time:") or "self [us]" in raw:
            continue
        fields = raw[len("import time:") :].split("|")
        if len(fields) != 3:
            continue
        self_us, cum_us, name_field = fields
        stripped = name_field.lstrip(" ")
        depth = (len(name_field) - len(stripped) - 1) // 2
        out.append(
            ImportLine(
                name=stripped.strip(),
                depth=depth,
                self_us=int(self_us),
                cumulative_us=int(cum_us),
                order=len(out),
            )
        )
    return out


def chain_of(lines: list[ImportLine], index: int) -> list[str]:
    """The import chain (outermost first) that first imported `lines[index]`.

    importtime prints a module when its import finishes, so a module's parent is the next line below
    it with a smaller depth.
    """
    chain = [lines[index].name]
    depth = lines[index].depth
    for line in lines[index + 1 :]:
        if line.depth < depth:
            chain.append(line.name)
            depth = line.depth
            if depth == 0:
                break
    return list(reversed(chain))


def import_report(args: tuple[str, ...], env: dict[str, str]) -> tuple[list[ImportLine], dict[str, list[str]]]:
    """Import lines of `python -X importtime -m upgrade_gate ARGS` and the chain of each heavy library."""
    argv = [PYTHON, "-X", "importtime", "-m", "upgrade_gate", *args]
    subprocess.run(argv, cwd=REPO, capture_output=True, check=False, env=env)  # fill the bytecode cache
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=False, env=env)
    lines = parse_importtime(proc.stderr)
    heavy: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        if line.name in HEAVY and line.name not in heavy:
            heavy[line.name] = chain_of(lines, i)
    return lines, heavy


def _offenders(lines: list[ImportLine], *, top: int = 12) -> str:
    """Top modules by cumulative time among the first two levels, and by self time overall."""
    shallow = sorted((ln for ln in lines if ln.depth <= 1), key=lambda ln: -ln.cumulative_us)[:top]
    selfish = sorted(lines, key=lambda ln: -ln.self_us)[:top]
    rows = [
        (
            f"`{a.name}` (depth {a.depth})",
            fmt_s(a.cumulative_us / 1e6),
            f"`{b.name}`",
            fmt_s(b.self_us / 1e6),
        )
        for a, b in zip(shallow, selfish, strict=False)
    ]
    return table(("module (cumulative)", "cumulative", "module (self)", "self"), rows)


def run(*, repeat: int = 7) -> Section:
    """Measure cold start and import chains; return the RESULTS.md section."""
    with tempfile.TemporaryDirectory(prefix="ug-bench-pyc-") as tmp:
        return _run(repeat=repeat, cache_dir=Path(tmp))


def _run(*, repeat: int, cache_dir: Path) -> Section:
    argv = cli_argv()
    cached = child_env(bytecode=True, cache_dir=cache_dir)
    uncached = child_env(bytecode=False, cache_dir=cache_dir)
    floor, floor_cpu = time_process([PYTHON, "-c", "pass"], repeat=repeat, env=cached)
    measured = {args: time_process([*argv, *args], repeat=repeat, env=cached) for args in COMMANDS}
    timings = {args: wall for args, (wall, _) in measured.items()}
    cold = {args: time_process([*argv, *args], repeat=max(3, repeat // 2), env=uncached)[0] for args in COMMANDS}
    rows = [("`python -c pass` (interpreter floor)", timing_cell(floor), timing_cell(floor_cpu), "")]
    rows += [
        (f"`upgrade-gate {' '.join(a)}`", timing_cell(wall), timing_cell(cpu), timing_cell(cold[a]))
        for a, (wall, cpu) in measured.items()
    ]
    body = [
        table(
            (
                "command (fresh process)",
                "wall, with .pyc cache (the target)",
                "CPU user+sys, with .pyc",
                "wall without .pyc (PYTHONDONTWRITEBYTECODE=1)",
            ),
            rows,
        )
    ]
    numbers: dict[str, object] = {"python_floor_s": floor.median, "python_floor_cpu_s": floor_cpu.median}
    numbers.update({"no-pyc upgrade-gate " + " ".join(a): t.median for a, t in cold.items()})
    numbers.update({"cpu upgrade-gate " + " ".join(a): cpu.median for a, (_, cpu) in measured.items()})
    targets = []
    for args, timing in timings.items():
        cmd = "upgrade-gate " + " ".join(args)
        numbers[cmd] = timing.median
        targets.append(
            Target(
                name=f"cold start `{cmd}`",
                goal=f"≤ {TARGET_S} s",
                measured=fmt_s(timing.median),
                met=timing.median <= TARGET_S,
            )
        )
    for args in COMMANDS:
        lines, heavy = import_report(args, cached)
        cmd = "upgrade-gate " + " ".join(args)
        total = max((ln.cumulative_us for ln in lines if ln.depth == 0), default=0)
        body.append(f"\n**`python -X importtime -m upgrade_gate {' '.join(args)}`** ({len(lines)} modules).")
        if heavy:
            body.append("Heavy libraries imported, with the chain that first pulled each in:\n")
            body.extend(f"- `{name}`: " + " → ".join(f"`{m}`" for m in chain) for name, chain in heavy.items())
        else:
            body.append("No heavy library (" + ", ".join(HEAVY) + ") is imported.")
        body.append("\nTop offenders:\n\n" + _offenders(lines))
        numbers[f"{cmd} heavy imports"] = {k: " -> ".join(v) for k, v in heavy.items()}
        numbers[f"{cmd} largest top-level import us"] = total
        heavy_bad = [h for h in heavy if h in FORBIDDEN]
        targets.append(
            Target(
                name=f"`{cmd}` imports no heavy library",
                goal="kubernetes, git, deepdiff, scipy, matplotlib, jsonschema not imported",
                measured=", ".join(heavy) or "none",
                met=not heavy_bad,
            )
        )
    return Section(title="CLI cold start", body="\n".join(body), targets=tuple(targets), numbers=numbers)


def main() -> None:
    """Run alone: `python -m bench.bench_cli`."""
    repeat = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    print_section(run(repeat=repeat))


if __name__ == "__main__":
    main()
