"""Read the dynamic interface of one ELF file with pyelftools: soname, DT_NEEDED, exports, imports.

Only what the dynamic linker uses is read: `.dynamic`, `.dynsym`, `.gnu.version` (versym),
`.gnu.version_d` (verdef) and `.gnu.version_r` (verneed). Code, debug info and the static symbol
table are never touched, so a multi-hundred-megabyte library costs its symbol table, not its size.

Design decisions:
- An export is a defined dynamic symbol with GLOBAL, WEAK or GNU_UNIQUE binding and DEFAULT or
  PROTECTED visibility, keyed by (name, version). `default` is False for a hidden version
  (`name@ver`, versym bit 15), True for `name@@ver` and for unversioned symbols.
- The symbols GNU ld emits for each version node (`hip_6.0` as an ABS OBJECT of value 0) are the
  version definitions themselves, not API: they are left out of the exports.
- An import is an undefined dynamic symbol with GLOBAL or WEAK binding; its version comes from the
  verneed entry that versym points at, which also names the library (`vn_file`) that must define it.
- Anything pyelftools cannot read in a file that starts with the ELF magic is a corrupt ELF:
  `InputError` (exit 3) naming the file. A file without the magic is not ELF (`is_elf` says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from upgrade_gate.errors import EnvironmentFailure, InputError

ELF_MAGIC = b"\x7fELF"
_EXPORT_BINDINGS = frozenset({"STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE", "STB_LOOS"})
_EXPORT_VISIBILITY = frozenset({"STV_DEFAULT", "STV_PROTECTED"})
_SKIP_TYPES = frozenset({"STT_SECTION", "STT_FILE"})
_HIDDEN = 0x8000


class ElfError(InputError):
    """A file that claims to be ELF but cannot be read as one (exit 3)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Export:
    """One symbol a shared library defines for others: `name@version` (or `name@@version`)."""

    name: str
    version: str | None
    default: bool = True
    binding: str  # GLOBAL / WEAK / GNU_UNIQUE
    type: str  # FUNC / OBJECT / TLS / GNU_IFUNC / NOTYPE / COMMON

    def label(self) -> str:
        """`name@version` as readelf prints it (`@@` for the default version)."""
        if self.version is None:
            return self.name
        return f"{self.name}{'@@' if self.default else '@'}{self.version}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Import:
    """One symbol a binary needs from elsewhere, with the version and library its verneed names."""

    name: str
    version: str | None = None
    library: str | None = None  # vn_file of the verneed entry, e.g. "libamdhip64.so.6"
    weak: bool = False

    def label(self) -> str:
        """`name@version`, or the bare name when unversioned."""
        return self.name if self.version is None else f"{self.name}@{self.version}"


@dataclass(frozen=True, slots=True, kw_only=True)
class ElfAbi:
    """The dynamic interface of one ELF file; content only (no path), so it can be cached by hash."""

    sha256: str
    kind: str  # ET_DYN / ET_EXEC
    machine: str  # EM_X86_64, EM_AMDGPU, ...
    soname: str | None = None
    needed: tuple[str, ...] = ()
    version_defs: tuple[str, ...] = ()  # version nodes it defines, base (file) entry excluded
    exports: tuple[Export, ...] = ()
    imports: tuple[Import, ...] = ()


def is_elf(path: Path) -> bool:
    """True when the file starts with the ELF magic (a linker script named `libc.so` does not)."""
    try:
        with path.open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def read_elf(path: Path, sha256: str) -> ElfAbi:
    """Read the dynamic interface of `path`; ElfError names the file when it is not readable ELF."""
    try:
        from elftools.common.exceptions import ELFError
    except ImportError as exc:  # a broken install is the environment's fault (exit 4), not the input's
        raise EnvironmentFailure(f"pyelftools is not importable ({exc}): pip install pyelftools") from None

    try:
        with path.open("rb") as fh:
            return _read(fh, sha256)
    except OSError as exc:
        raise ElfError(f"{path}: unreadable: {exc.strerror or exc}") from None
    except (ELFError, ValueError, KeyError, TypeError, AttributeError, IndexError, AssertionError) as exc:
        raise ElfError(f"{path}: corrupt ELF: {exc or type(exc).__name__}") from None
    except Exception as exc:  # construct's StreamError and friends: pyelftools has no common root
        if type(exc).__module__.startswith(("construct", "elftools")):
            raise ElfError(f"{path}: corrupt ELF: {exc or type(exc).__name__}") from None
        raise


def _read(fh: BinaryIO, sha256: str) -> ElfAbi:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerDefSection, GNUVerNeedSection, GNUVerSymSection
    from elftools.elf.sections import SymbolTableSection

    elf = ELFFile(fh)
    dynsym: SymbolTableSection | None = None
    versym: GNUVerSymSection | None = None
    verdef: GNUVerDefSection | None = None
    verneed: GNUVerNeedSection | None = None
    dynamic: DynamicSection | None = None
    for section in elf.iter_sections():
        kind = section["sh_type"]
        if kind == "SHT_DYNSYM" and isinstance(section, SymbolTableSection):
            dynsym = section
        elif isinstance(section, GNUVerSymSection):
            versym = section
        elif isinstance(section, GNUVerDefSection):
            verdef = section
        elif isinstance(section, GNUVerNeedSection):
            verneed = section
        elif isinstance(section, DynamicSection):
            dynamic = section
    soname: str | None = None
    needed: list[str] = []
    if dynamic is not None:
        for tag in dynamic.iter_tags():
            if tag.entry.d_tag == "DT_SONAME":
                soname = str(getattr(tag, "soname"))  # noqa: B009 - pyelftools sets it per tag kind
            elif tag.entry.d_tag == "DT_NEEDED":
                needed.append(str(getattr(tag, "needed")))  # noqa: B009
    defined: dict[int, str] = {}
    if verdef is not None:
        for entry, aux in verdef.iter_versions():
            names = [a.name for a in aux]
            if names and not entry["vd_flags"] & 0x1:  # VER_FLG_BASE: the file's own name
                defined[int(entry["vd_ndx"])] = str(names[0])
    required: dict[int, tuple[str, str]] = {}
    if verneed is not None:
        for entry, aux in verneed.iter_versions():
            for a in aux:
                required[int(a["vna_other"])] = (str(a.name), str(entry.name))
    exports: list[Export] = []
    imports: list[Import] = []
    if dynsym is not None:
        for i, sym in enumerate(dynsym.iter_symbols()):
            if i == 0 or not sym.name:
                continue
            exp, imp = _classify(sym, _ndx(versym, i), defined, required)
            if exp is not None:
                exports.append(exp)
            elif imp is not None:
                imports.append(imp)
    return ElfAbi(
        sha256=sha256,
        kind=str(elf["e_type"]),
        machine=str(elf["e_machine"]),
        soname=soname,
        needed=tuple(needed),
        version_defs=tuple(defined[k] for k in sorted(defined)),
        exports=tuple(sorted(set(exports), key=lambda e: (e.name, e.version or ""))),
        imports=tuple(sorted(set(imports), key=lambda m: (m.name, m.version or "", m.library or ""))),
    )


def _ndx(versym: Any, i: int) -> int:
    if versym is None:
        return 1
    raw = versym.get_symbol(i)["ndx"]
    if isinstance(raw, str):  # pyelftools names the reserved values: VER_NDX_LOCAL / VER_NDX_GLOBAL
        return 0 if raw == "VER_NDX_LOCAL" else 1
    return int(raw)


def _classify(
    sym: Any, ndx: int, defined: dict[int, str], required: dict[int, tuple[str, str]]
) -> tuple[Export | None, Import | None]:
    info = sym["st_info"]
    binding = str(info["bind"])
    stype = str(info["type"])
    if stype in _SKIP_TYPES:
        return None, None
    index = ndx & ~_HIDDEN
    if sym["st_shndx"] == "SHN_UNDEF":
        if binding not in ("STB_GLOBAL", "STB_WEAK"):
            return None, None
        version, library = required.get(index, (None, None))
        return None, Import(name=sym.name, version=version, library=library, weak=binding == "STB_WEAK")
    if binding not in _EXPORT_BINDINGS or str(sym["st_other"]["visibility"]) not in _EXPORT_VISIBILITY:
        return None, None
    version = defined.get(index)
    if version is not None and sym.name == version and sym["st_shndx"] == "SHN_ABS":
        return None, None  # the version node's own marker symbol
    return (
        Export(
            name=sym.name,
            version=version,
            default=not ndx & _HIDDEN,
            binding=binding.removeprefix("STB_"),
            type=stype.removeprefix("STT_"),
        ),
        None,
    )
