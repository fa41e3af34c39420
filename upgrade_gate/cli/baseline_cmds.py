"""The `baseline` command group: save, migrate, list, show, log, diff, aggregate and deny in a git store.

Every command takes `--store DIR` (or `UPGRADE_GATE_STORE`). Output is plain text (JSON documents in
canonical form), so it pipes and diffs well. Exit codes: 0 done; 3 a snapshot file or name that is
bad, a node or ref the store does not have, a tag that already exists; 4 the store cannot be read or
written (not a store, another writer holding it too long, git failing). `baseline diff` exits 0
whether or not the baselines differ: judging a difference is the `diff` / `gate` commands' job.

`baseline save` refuses (exit 3, one line naming the node and what is missing) a snapshot that cannot
be a baseline: one with no GPU at all, or with required probes that failed and that no fallback stood
in for. Everything judged against such a baseline later would be meaningless (a 0-GPU baseline makes
every GPU "added", a failed probe leaves fields unknown forever). `--force` saves it anyway, with a
warning per node on stderr.
gitpython is imported inside command bodies (via `store.gitstore`) so `--help` stays fast.
"""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from upgrade_gate.errors import ExitCode, InputError, StoreError, UsageError
from upgrade_gate.report.printable import json_printable, one_line, printable

if TYPE_CHECKING:
    from collections.abc import Iterator

    from upgrade_gate.model import Snapshot
    from upgrade_gate.store.aggregate import ClassAccumulator
    from upgrade_gate.store.gitstore import BaselineStore

STORE_HELP = "Baseline store folder, a git repository created by `baseline save` (default: ./baselines)."


def _store_option() -> Path:
    from upgrade_gate.store.layout import DEFAULT_STORE, STORE_ENV

    return typer.Option(  # type: ignore[no-any-return]
        DEFAULT_STORE, "--store", envvar=STORE_ENV, help=STORE_HELP, show_default=False
    )


def _open(store: Path) -> BaselineStore:
    try:
        from upgrade_gate.store.gitstore import BaselineStore
    except ImportError as exc:  # gitpython refuses to import when no git binary is found
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreError(f"{store}: the baseline store needs the git binary: {first}") from exc
    return BaselineStore(store)


def register(app: typer.Typer) -> None:
    """Add the `baseline` sub-app to the app."""
    sub = typer.Typer(
        name="baseline",
        help="Versioned node baselines in a git store: save, migrate, list, show, log, diff, aggregate, deny.",
        no_args_is_help=True,
        rich_markup_mode=None,
    )
    sub.command("save")(save_cmd)
    sub.command("migrate")(migrate_cmd)
    sub.command("list")(list_cmd)
    sub.command("show")(show_cmd)
    sub.command("log")(log_cmd)
    sub.command("diff")(diff_cmd)
    sub.command("aggregate")(aggregate_cmd)
    sub.command("deny")(deny_cmd)
    sub.command("denylist")(denylist_cmd)
    app.add_typer(sub, name="baseline")


def baseline_problems(snap: Snapshot) -> list[str]:
    """Why a snapshot cannot be a baseline (empty when it can): no GPUs, required probes that failed."""
    problems: list[str] = []
    if not snap.gpus:
        problems.append("no GPUs")
    covered = {name for p in snap.probes if p.ok for name in p.fallback_for}
    failed = sorted(p.name for p in snap.probes if not p.ok and p.required and p.name not in covered)
    if failed:
        problems.append(f"{len(failed)} probe(s) failed ({', '.join(failed)})")
    return problems


def save_cmd(
    snapshots: list[Path] = typer.Argument(None, help="Snapshot JSON files, one per node."),
    sources: list[Path] = typer.Option(
        [], "--snapshots", help="A directory of snapshot files or a list file (one path a line); repeatable."
    ),
    store: Path = _store_option(),
    tag: str | None = typer.Option(None, "--tag", help="Tag the save, e.g. rocm-6.1.3 (must be new)."),
    message: str | None = typer.Option(None, "-m", "--message", help="Commit message."),
    class_reference: bool = typer.Option(
        True,
        "--class-reference/--no-class-reference",
        help="Also save classes/<class>.json for the classes saved (what `gate` reuses).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Save a snapshot that cannot be a baseline (no GPUs, failed probes) anyway."
    ),
) -> ExitCode:
    """Save snapshots as the nodes' baselines: one commit, optionally tagged; creates the store.

    With the class reference (default) the same commit keeps `classes/<class>.json` of every class
    saved, aggregated over the saved snapshots and the store's other baselines of that class, so
    `gate` reuses it instead of aggregating the fleet on every run.
    """
    from upgrade_gate.cli.gate_stream import candidate_paths
    from upgrade_gate.snapshot.io import load_snapshot
    from upgrade_gate.store.aggregate import ClassAccumulator

    paths = candidate_paths(list(snapshots or ()), sources)
    accs: dict[str, ClassAccumulator] = {}
    saved: set[str] = set()

    def each() -> Iterator[Snapshot]:
        """The snapshots one at a time (issue 26: a fleet is streamed, never held), each checked."""
        for path in paths:
            snap = load_snapshot(path)
            problems = baseline_problems(snap)
            if problems:
                what = f"{snap.node.name}: cannot be a baseline: {'; '.join(problems)}"
                if not force:
                    raise InputError(f"{what} (fix the node or its probes; --force saves it anyway)")
                typer.echo(one_line(f"WARNING: {what}; saved anyway because of --force"), err=True)
            saved.add(snap.node.name)
            if class_reference and snap.node.node_class is not None:
                accs.setdefault(snap.node.node_class, ClassAccumulator(snap.node.node_class)).add(snap)
            yield snap

    with _open(store) as st:
        sha = st.save_stream(each(), tag=tag, message=message, documents=lambda: _class_documents(st, accs, saved))
        for warning in st.warnings:  # landed, but something after the commit point failed
            typer.echo(one_line(f"upgrade-gate: warning: {warning}"), err=True)
    tagged = f" tagged {tag}" if tag else ""
    typer.echo(one_line(f"saved {len(saved)} node(s) to {store} as {sha[:12]}{tagged}"))
    return ExitCode.PASS


def _class_documents(
    st: BaselineStore, accs: dict[str, ClassAccumulator], names: set[str]
) -> dict[str, tuple[str, object]]:
    """classes/<class>.json of each class tallied in `accs` (the saved snapshots) with the store's other
    baselines of that class added (read at HEAD, one at a time)."""
    if not accs:
        return {}
    from upgrade_gate.store.aggregate import class_reference_to_document

    pin = st.pin(None)
    for node in st.nodes(pin):
        if node not in names:
            snap = st.load_trusted(node, pin)
            acc = accs.get(snap.node.node_class or "")
            if acc is not None:
                acc.add(snap)
    return {
        f"classes/{cls}.json": ("class-reference", class_reference_to_document(acc.result()))
        for cls, acc in sorted(accs.items())
    }


def migrate_cmd(store: Path = _store_option()) -> ExitCode:
    """Rewrite the store's v1 baselines as snapshot schema v2 (columnar measurements) in one commit.

    Streamed (memory does not grow with the fleet); tags and history are left as they are (their v1
    documents stay readable). A store already all v2 gets no commit. A save that lands meanwhile wins
    for the nodes it wrote. Exit 3: a baseline that does not decode (nothing is committed).
    """
    with _open(store) as st:
        done = st.migrate()
        for warning in st.warnings:
            typer.echo(one_line(f"upgrade-gate: warning: {warning}"), err=True)
    if done.raced:
        shown = ", ".join(done.raced[:8]) + (f" and {len(done.raced) - 8} more" if len(done.raced) > 8 else "")
        typer.echo(
            one_line(f"upgrade-gate: note: a save changed {len(done.raced)} node(s) meanwhile: {shown}"), err=True
        )
    if done.commit is None:
        typer.echo(one_line(f"nothing to migrate in {store}: {done.already} baseline(s), all schema v2"))
    else:
        typer.echo(
            one_line(
                f"migrated {len(done.migrated)} baseline(s) in {store} to schema v2 as {done.commit[:12]}"
                f" ({done.already} already v2)"
            )
        )
    return ExitCode.PASS


def list_cmd(
    store: Path = _store_option(),
    ref: str | None = typer.Option(None, "--ref", help="Commit, tag or branch (default HEAD)."),
) -> ExitCode:
    """List the nodes that have a baseline."""
    with _open(store) as st:
        for node in st.nodes(ref):
            typer.echo(one_line(node))
    return ExitCode.PASS


def _split_ref(spec: str) -> tuple[str, str | None]:
    node, sep, ref = spec.partition("@")
    if sep and not ref:
        raise UsageError(f"{spec!r}: expected NODE or NODE@REF")
    return node, (ref if sep else None)


def show_cmd(
    node: str = typer.Argument(..., metavar="NODE[@REF]", help="Node name, optionally @commit/tag/branch."),
    store: Path = _store_option(),
) -> ExitCode:
    """Print a node's baseline (canonical JSON)."""
    from upgrade_gate.snapshot.io import dumps_snapshot

    name, ref = _split_ref(node)
    with _open(store) as st:
        typer.echo(json_printable(dumps_snapshot(st.load(name, ref))), nl=False)
    return ExitCode.PASS


def log_cmd(node: str = typer.Argument(..., help="Node name."), store: Path = _store_option()) -> ExitCode:
    """Show every commit that changed a node's baseline, newest first."""
    with _open(store) as st:
        entries = st.log(node)
    for e in entries:
        tags = f"  [{', '.join(e.tags)}]" if e.tags else ""
        typer.echo(one_line(f"{e.sha[:12]}  {e.date}  {e.message.splitlines()[0]}{tags}"))
    return ExitCode.PASS


def diff_cmd(
    node: str = typer.Argument(..., help="Node name."),
    ref1: str = typer.Argument(..., help="Older commit, tag or branch."),
    ref2: str = typer.Argument(..., help="Newer commit, tag or branch."),
    store: Path = _store_option(),
) -> ExitCode:
    """Unified diff of a node's baseline between two refs (exit 0 either way)."""
    from upgrade_gate.snapshot.io import dumps_snapshot

    with _open(store) as st:
        old, new = st.diff_refs(node, ref1, ref2)
    lines = list(
        difflib.unified_diff(
            dumps_snapshot(old).splitlines(keepends=True),
            dumps_snapshot(new).splitlines(keepends=True),
            fromfile=f"{node}@{ref1}",
            tofile=f"{node}@{ref2}",
        )
    )
    typer.echo(
        printable("".join(lines) if lines else f"{node}: no differences between {ref1} and {ref2}"), nl=not lines
    )
    return ExitCode.PASS


def aggregate_cmd(
    nodes: list[str] = typer.Argument(None, help="Nodes to aggregate (default: every node of the class)."),
    node_class: str = typer.Option(..., "--class", help="Node class name, e.g. mi300x-8gpu."),
    store: Path = _store_option(),
    ref: str | None = typer.Option(None, "--ref", help="Commit, tag or branch (default HEAD)."),
    out: Path | None = typer.Option(None, "--out", help="Write the class reference here, not stdout."),
    save: bool = typer.Option(False, "--save", help="Also keep it in the store as classes/CLASS.json."),
) -> ExitCode:
    """Build a class reference (prevailing order, firmware, VF counts, metric medians and spread)."""
    from upgrade_gate.docio import write_text_atomic
    from upgrade_gate.snapshot.io import canonical_json
    from upgrade_gate.store import layout
    from upgrade_gate.store.aggregate import aggregate_class, class_reference_to_document, odd_ones_out

    document_name = layout.check_document_name(f"classes/{node_class}.json")
    with _open(store) as st:
        names = list(nodes or ())
        snaps = [st.load(n, ref) for n in names]
        if not names:
            snaps = [s for s in (st.load(n, ref) for n in st.nodes(ref)) if s.node.node_class == node_class]
            if not snaps:
                raise InputError(f"{store}: no baseline of class {node_class!r} at {ref or 'HEAD'}")
        reference = aggregate_class(node_class, snaps)
        document = class_reference_to_document(reference)
        if save:
            st.write_document(document_name, document, f"class reference {node_class}", schema="class-reference")
    text = canonical_json(document)
    if out is None:
        typer.echo(json_printable(text), nl=False)
    else:
        write_text_atomic(out, text)
        typer.echo(one_line(f"wrote class {node_class} reference of {len(snaps)} node(s) to {out}"))
    for snap in sorted(snaps, key=lambda s: s.node.name):
        for line in odd_ones_out(reference, snap):
            print(one_line(f"odd one out: {snap.node.name}: {line}"), file=sys.stderr)
    return ExitCode.PASS


def deny_cmd(
    serial: str = typer.Argument(..., help="GPU serial number to deny."),
    reason: str = typer.Option(..., "--reason", help="Why (e.g. the failed phase or dmesg event)."),
    store: Path = _store_option(),
    node: str | None = typer.Option(None, "--node", help="Node the GPU failed on."),
) -> ExitCode:
    """Put a GPU serial on the store's denylist so it does not quietly rejoin the fleet."""
    with _open(store) as st:
        entry = st.deny(serial, reason, node)
    where = f" on {entry.node}" if entry.node else ""
    if entry.reason != reason.strip() or (node is not None and entry.node != node):
        typer.echo(one_line(f"GPU {entry.serial} was already denied{where} at {entry.added_at}: {entry.reason}"))
    else:
        typer.echo(one_line(f"denied GPU {entry.serial}{where}: {entry.reason}"))
    return ExitCode.PASS


def denylist_cmd(
    store: Path = _store_option(),
    ref: str | None = typer.Option(None, "--ref", help="Commit, tag or branch (default HEAD)."),
) -> ExitCode:
    """List denied GPU serials: serial, date, node, reason."""
    with _open(store) as st:
        entries = st.denylist(ref)
    for serial in sorted(entries):
        e = entries[serial]
        typer.echo(one_line(f"{e.serial}  {e.added_at}  {e.node or '-'}  {e.reason}"))
    return ExitCode.PASS
