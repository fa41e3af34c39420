"""Compare a running and a candidate library tree, and check consumers against the candidate.

Findings use the gate's own `Finding` type, so every reporter renders them. The subject (`node`) is
`libraries` for the tree comparison and the consumer's path for a consumer.

Design decisions:
- Libraries are matched by soname. A soname gone from the candidate whose stem (`libamdhip64` of
  `libamdhip64.so.5`) reappears under another soname is a soname bump; the plan may declare it
  (`expected`: old soname -> new soname), which turns the library-level finding and its symbol diff
  into info (a new major may break its ABI by definition; the report still names each change). A
  declared bump does not help a consumer that still needs the old soname: it cannot load, and that
  blocks.
- Symbols are compared per (name, version). Gone with the name still exported under another version
  is a re-versioning; gone altogether is a removal; both break binaries linked against the old
  library. Binding and type changes break them too (a WEAK that became GLOBAL changes interposition,
  a FUNC that became an OBJECT changes relocation). Additions are compatible: one info per library.
- Consumers: every DT_NEEDED soname that the running tree provides (or that the plan bumps) must be
  provided by the candidate. Every versioned import whose verneed names a ROCm library must be
  exported by it with that version. An unversioned import is looked up in the consumer's needed ROCm
  libraries of the running tree; if one of them exported it, one of the candidate's must still
  export it (any version: the dynamic linker binds an unversioned reference to the base definition).
  A weak import that disappears only warns: the binary loads, the feature degrades.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from upgrade_gate.abi.elf import ElfAbi, Export, Import
from upgrade_gate.abi.tree import ElfFile, LibraryTree
from upgrade_gate.model import Finding, NodeName, RuleId, Severity

LIBRARIES = NodeName("libraries")

RULES: Mapping[str, str] = {
    "abi.library_removed": "a library (soname) of the running tree is gone from the candidate",
    "abi.soname_changed": "a library's soname changed (a bump); accepted when the plan declares it",
    "abi.soname_plan_unmet": "a soname change the plan declares did not happen in the candidate",
    "abi.symbol_removed": "an exported symbol is gone from the candidate",
    "abi.symbol_reversioned": "an exported symbol is still there, but not under the version it had",
    "abi.symbol_binding_changed": "an exported symbol changed binding (GLOBAL/WEAK/GNU_UNIQUE)",
    "abi.symbol_type_changed": "an exported symbol changed type (FUNC/OBJECT/TLS/IFUNC)",
    "abi.symbols_added": "symbols the candidate exports in addition (compatible)",
    "abi.library_added": "a library only the candidate has (compatible)",
    "abi.consumer_needed_missing": "a consumer's DT_NEEDED ROCm library is not provided by the candidate",
    "abi.consumer_symbol_missing": "a symbol a consumer imports from a ROCm library is not exported by the candidate",
    "abi.consumer_weak_symbol_missing": "a weak import a consumer has is no longer exported (loads, degrades)",
}
"""Every rule id `abi` can report, with its one-line meaning (one JUnit case each)."""

_SHOWN_ADDED = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Consumer:
    """One binary to check: its path and dynamic interface."""

    path: str
    abi: ElfAbi


def _finding(
    rule: str,
    severity: Severity,
    subject: str,
    message: str,
    *,
    device: str | None = None,
    path: str | None = None,
    expected: object = None,
    actual: object = None,
    evidence: str | None = None,
    hint: str | None = None,
) -> Finding:
    assert rule in RULES, rule
    return Finding(
        rule=RuleId(rule),
        severity=severity,
        node=NodeName(subject),
        message=message,
        device=device,
        path=path,
        expected=expected,
        actual=actual,
        evidence=evidence,
        hint=hint,
    )


def soname_stem(soname: str) -> str:
    """`libamdhip64` for `libamdhip64.so.6` (the part a soname bump keeps)."""
    return re.sub(r"\.so(\..*)?$", "", soname)


def soname_moves(running: LibraryTree, candidate: LibraryTree) -> dict[str, str]:
    """Sonames gone from the candidate whose stem the candidate provides under another soname."""
    fresh: dict[str, list[str]] = {}
    for key in candidate.libraries:
        if key not in running.libraries:
            fresh.setdefault(soname_stem(key), []).append(key)
    moves: dict[str, str] = {}
    for key in running.libraries:
        if key not in candidate.libraries and len(fresh.get(soname_stem(key), ())) == 1:
            moves[key] = fresh[soname_stem(key)][0]
    return moves


def compare_trees(running: LibraryTree, candidate: LibraryTree, expected: Mapping[str, str]) -> list[Finding]:
    """Library-level findings: removals, soname bumps, symbol changes, additions."""
    out: list[Finding] = []
    moves = soname_moves(running, candidate)
    for old, new in sorted(expected.items()):
        if old in candidate.libraries or new not in candidate.libraries:
            out.append(
                _finding(
                    "abi.soname_plan_unmet",
                    Severity.BLOCK,
                    LIBRARIES,
                    f"the plan moves {old} to {new}, but the candidate "
                    + (f"still provides {old}" if old in candidate.libraries else f"does not provide {new}"),
                    device=old,
                    expected=new,
                    actual=moves.get(old, old if old in candidate.libraries else None),
                    evidence=candidate.root,
                )
            )
    for key, before in running.libraries.items():
        after = candidate.libraries.get(key)
        if after is not None:
            out.extend(_compare_symbols(key, before, after))
            continue
        moved_to = moves.get(key)
        if moved_to is None:
            out.append(
                _finding(
                    "abi.library_removed",
                    Severity.BLOCK,
                    LIBRARIES,
                    f"{key} is gone from the candidate ({len(before.abi.exports)} exported symbols)",
                    device=key,
                    expected=key,
                    actual=None,
                    evidence=before.path,
                )
            )
            continue
        new = moved_to
        declared = expected.get(key) == new
        out.append(
            _finding(
                "abi.soname_changed",
                Severity.INFO if declared else Severity.BLOCK,
                LIBRARIES,
                f"{key} became {new}"
                + (" (declared by the plan)" if declared else ": binaries linked against it will not load"),
                device=key,
                expected=key,
                actual=new,
                evidence=candidate.libraries[new].path,
                hint=None if declared else "declare it in the plan (change.sonames) once consumers are rebuilt",
            )
        )
        severity = Severity.INFO if declared else Severity.BLOCK
        out.extend(_compare_symbols(key, before, candidate.libraries[new], severity=severity, shown=new))
    targets = set(moves.values())
    for key, item in candidate.libraries.items():
        if key not in running.libraries and key not in targets:
            out.append(
                _finding(
                    "abi.library_added",
                    Severity.INFO,
                    LIBRARIES,
                    f"{key} is new in the candidate",
                    device=key,
                    expected=None,
                    actual=key,
                    evidence=item.path,
                )
            )
    return out


def _by_key(exports: Iterable[Export]) -> dict[tuple[str, str | None], Export]:
    return {(e.name, e.version): e for e in exports}


def _compare_symbols(
    key: str, before: ElfFile, after: ElfFile, *, severity: Severity = Severity.BLOCK, shown: str | None = None
) -> list[Finding]:
    lib = shown or key
    old = _by_key(before.abi.exports)
    new = _by_key(after.abi.exports)
    versions_of: dict[str, list[str]] = {}
    for name, version in new:
        versions_of.setdefault(name, []).append(version or "(unversioned)")
    out: list[Finding] = []
    for (name, version), sym in old.items():
        label = sym.label()
        now = new.get((name, version))
        if now is None:
            others = versions_of.get(name)
            if others:
                out.append(
                    _finding(
                        "abi.symbol_reversioned",
                        severity,
                        LIBRARIES,
                        f"{label} is re-versioned in {lib}: now {', '.join(f'{name}@{v}' for v in sorted(others))}",
                        device=lib,
                        path=f"{lib}:{name}",
                        expected=version,
                        actual=sorted(others),
                        evidence=after.path,
                    )
                )
            else:
                out.append(
                    _finding(
                        "abi.symbol_removed",
                        severity,
                        LIBRARIES,
                        f"{label} is gone from {lib} in the candidate",
                        device=lib,
                        path=f"{lib}:{name}",
                        expected=label,
                        actual=None,
                        evidence=after.path,
                    )
                )
            continue
        for rule, attr in (("abi.symbol_binding_changed", "binding"), ("abi.symbol_type_changed", "type")):
            was, now_value = getattr(sym, attr), getattr(now, attr)
            if was != now_value:
                out.append(
                    _finding(
                        rule,
                        severity,
                        LIBRARIES,
                        f"{label} in {lib} changed {attr}: {was} -> {now_value}",
                        device=lib,
                        path=f"{lib}:{name}",
                        expected=was,
                        actual=now_value,
                        evidence=after.path,
                    )
                )
    old_names = {name for name, _version in old}
    added = sorted(new[k].label() for k in new.keys() - old.keys() if k[0] not in old_names)  # not re-versions
    if added:
        more = f", … (+{len(added) - _SHOWN_ADDED})" if len(added) > _SHOWN_ADDED else ""
        out.append(
            _finding(
                "abi.symbols_added",
                Severity.INFO,
                LIBRARIES,
                f"{lib} exports {len(added)} new symbol(s) (compatible): {', '.join(added[:_SHOWN_ADDED])}{more}",
                device=lib,
                actual=len(added),
                evidence=after.path,
            )
        )
    return out


class _Index:
    """Export lookups by (name, version) and by name, built once per library file."""

    def __init__(self) -> None:
        self._pairs: dict[str, frozenset[tuple[str, str | None]]] = {}
        self._names: dict[str, frozenset[str]] = {}

    def has(self, item: ElfFile | None, name: str, version: str | None = None, *, any_version: bool = False) -> bool:
        if item is None:
            return False
        digest = item.abi.sha256
        if digest not in self._pairs:
            self._pairs[digest] = frozenset((e.name, e.version) for e in item.abi.exports)
            self._names[digest] = frozenset(e.name for e in item.abi.exports)
        return name in self._names[digest] if any_version else (name, version) in self._pairs[digest]


def check_consumers(
    consumers: Iterable[Consumer], running: LibraryTree, candidate: LibraryTree, expected: Mapping[str, str]
) -> list[Finding]:
    """Every consumer's needed ROCm sonames and imported ROCm symbols against the candidate."""
    index = _Index()
    moves = soname_moves(running, candidate)
    out: list[Finding] = []
    for consumer in consumers:
        out.extend(_check_consumer(consumer, running, candidate, expected, moves, index))
    return out


def _check_consumer(
    consumer: Consumer,
    running: LibraryTree,
    candidate: LibraryTree,
    expected: Mapping[str, str],
    moves: Mapping[str, str],
    index: _Index,
) -> list[Finding]:
    name = consumer.path
    short = consumer.path.rsplit("/", 1)[-1]
    rocm = set(running.libraries) | set(expected)
    out: list[Finding] = []
    needed = [n for n in consumer.abi.needed if n in rocm]
    for soname in needed:
        if soname not in candidate.libraries:
            bump = expected.get(soname) or moves.get(soname)
            out.append(
                _finding(
                    "abi.consumer_needed_missing",
                    Severity.BLOCK,
                    name,
                    f"{short} needs {soname}, not provided by the candidate"
                    + (f" (it provides {bump}: rebuild {short} against it)" if bump else ""),
                    device=soname,
                    expected=soname,
                    actual=bump,
                    evidence=candidate.root,
                )
            )
    present = [s for s in needed if s in candidate.libraries]
    for imp in consumer.abi.imports:
        problem = _import_problem(imp, present, needed, running, candidate, index)
        if problem is None:
            continue
        library, where = problem
        out.append(
            _finding(
                "abi.consumer_weak_symbol_missing" if imp.weak else "abi.consumer_symbol_missing",
                Severity.WARN if imp.weak else Severity.BLOCK,
                name,
                f"{short} needs {imp.label()}, {where} {library} in the candidate",
                device=library,
                path=f"{library}:{imp.name}",
                expected=imp.label(),
                actual=None,
                evidence=candidate.libraries[library].path if library in candidate.libraries else candidate.root,
            )
        )
    return out


def _import_problem(
    imp: Import,
    present: list[str],
    needed: list[str],
    running: LibraryTree,
    candidate: LibraryTree,
    index: _Index,
) -> tuple[str, str] | None:
    """(library, wording) when the candidate cannot satisfy `imp`; None when it can or it is not ROCm's."""
    if imp.version is not None and imp.library is not None:
        lib = candidate.libraries.get(imp.library)
        if imp.library not in running.libraries and lib is None:
            return None  # not a ROCm library (glibc, libstdc++): not ours to judge
        if lib is None:
            return None  # the DT_NEEDED finding already says the whole library is missing
        if index.has(lib, imp.name, imp.version):
            return None
        had = index.has(running.libraries.get(imp.library), imp.name, imp.version)
        return imp.library, "gone from" if had else "not exported by"
    providers = [s for s in needed if index.has(running.libraries.get(s), imp.name, any_version=True)]
    if not providers:
        return None  # no ROCm library of the running tree provided it either: not ours
    if not any(s in candidate.libraries for s in providers):
        return None  # the DT_NEEDED finding already says the library that provided it is missing
    if any(index.has(candidate.libraries.get(s), imp.name, any_version=True) for s in present):
        return None
    return providers[0], "gone from"
