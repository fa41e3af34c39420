"""Binary compatibility of ROCm library trees and the binaries that load them (`upgrade-gate abi`).

Modules, in import order: `elf` reads one file's dynamic interface with pyelftools (the only module
that imports it; an import-linter contract says so); `tree` finds the ELF files of a folder and reads
them in parallel through a cache keyed by file hash; `check` compares two trees and checks consumers,
producing the gate's own `Finding`s; `verdict` assembles them into a `GateReport`, so every reporter
renders the answer; `listing` is the JSON the node probe `rocm_libs` prints (`upgrade-gate abi-list`)
and its parser, which the snapshot builder uses.

The package sits at the bottom of the stage layers (beside `parse`): it depends on the model and the
error tree only, and the plan reaches it as a plain mapping of expected soname changes.
"""
