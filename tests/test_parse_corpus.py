"""Every registered parser on the recorded outputs: goldens, refusals, corpus copies, mutations.

One harness driven by the parser registry (`upgrade_gate.parse.registry.all_parsers`), replacing the
copies each parser's test module used to carry. `SUITES` says, per fixture folder, which registry key
parses each recorded output (its golden is `<case>.expected.json`, `--update-goldens` rewrites it),
which outputs must be refused and with what message, and which outputs of other commands every
parser of the folder must refuse. The tests then check, for every suite and every registered key:
- each golden case parses to its golden (a wrapped golden records a `ParseError` as a value);
- each output of the folder is a golden case, a refused output or a foreign one (nothing untested),
  and each corpus file is in the folder unchanged;
- the registry holds exactly the pinned keys, and every key has recorded outputs to be tested on;
- mutated outputs (lines and characters; JSON values of other types) and random text make a parser
  return a value or raise `ParseError`, nothing else; the value's derived views must not raise either.
Parser-specific assertions stay in each tool's test module.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CORPUS, FIXTURES, check_golden
from tests.mutations import edited_text, mutated_lines
from tests.test_parse_amdsmi_mutations import mutated_json, mutated_text
from upgrade_gate.codec import to_jsonable
from upgrade_gate.errors import ParseError
from upgrade_gate.parse import lspci, perftest, rccl_tests, rocminfo, rvs, sysfs
from upgrade_gate.parse.registry import all_parsers

PARSERS = all_parsers()


class Shape(enum.Enum):
    """How a golden file records a result (the forms the goldens were written in)."""

    PLAIN = "plain"  # the value as JSON; a ParseError fails the test
    WRAPPED = "wrapped"  # {"result": value, ...views} or {"error": {tool, line_no, message}}
    OR_ERROR = "or-error"  # the value as JSON, or {"ParseError": {tool, line_no, message}}


def _by_prefix(table: tuple[tuple[str, str], ...], default: str) -> Callable[[str], str]:
    def key_of(name: str) -> str:
        return next((key for prefix, key in table if name.startswith(prefix)), default)

    return key_of


def _nvidia_smi_key(name: str) -> str:
    """nvidia-smi outputs by subcommand, named in the file name (`-topo-m-`, `-nvlink-s-`)."""
    return "nvidia-smi-topo" if "-topo-m-" in name else "nvidia-smi-nvlink" if "-nvlink-s-" in name else ""


def _sysfs_views(result: object) -> dict[str, Any]:
    if not isinstance(result, sysfs.SysfsValues):
        return {}
    return {"sriov_by_pf": to_jsonable(sysfs.sriov_by_pf(result)), "ib_fw_versions": sysfs.ib_fw_versions(result)}


def _perftest_views(result: object) -> dict[str, Any]:
    assert isinstance(result, perftest.PerftestResult)
    perftest.to_measurement(result, rail=result.device or "x", peer=None)
    return {}


def _rccl_views(result: object) -> dict[str, Any]:
    assert isinstance(result, rccl_tests.RcclTestsResult)
    if result.settings is not None:
        rccl_tests.to_measurements(result)
    return {}


def _rvs_views(result: object) -> dict[str, Any]:
    assert isinstance(result, rvs.RvsResult | rvs.AgfhcResult)
    _ = (result.passed, result.first_failure)
    return {}


@dataclass(frozen=True, kw_only=True)
class Suite:
    """The recorded outputs of one fixture folder and how each is tested."""

    folder: str
    cases: Mapping[str, str] | Callable[[str], str]  # file name -> registry key (a table, or a rule)
    outputs: tuple[str, ...] = ("*.txt",)  # globs of the recorded outputs in the folder
    shape: Shape = Shape.PLAIN
    # Derived views of a value: part of a WRAPPED golden; in the property tests they may raise
    # ParseError too (a perftest run without its settings header has no comparable measurement).
    views: Callable[[object], dict[str, Any]] = lambda _: {}
    rejected: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # name -> (key, message)
    foreign: tuple[str, ...] = ()  # outputs of commands not parsed: every key of the suite refuses them
    # Second readings of an output by another key, golden `<stem><suffix>` (phase 2's thermal readers
    # read `amd-smi monitor` and rocm-smi's JSON): (file name, key, golden suffix).
    also: tuple[tuple[str, str, str], ...] = ()
    corpus: str | None = None  # corpus folder whose files must be in the fixtures unchanged
    corpus_glob: str = "*.txt"

    @property
    def path(self) -> Path:
        return FIXTURES / self.folder

    def output_names(self) -> list[str]:
        found = {p.name for g in self.outputs for p in self.path.glob(g)}
        return sorted(n for n in found if not n.endswith(".expected.json"))

    def key_of(self, name: str) -> str | None:
        if name in self.rejected or name in self.foreign:
            return None
        if isinstance(self.cases, Mapping):
            return self.cases.get(name)
        return self.cases(name)

    def golden_cases(self) -> list[tuple[str, str]]:
        return [(name, key) for name in self.output_names() if (key := self.key_of(name)) is not None]

    def parser_keys(self) -> set[str]:
        """The keys that read this folder's own command outputs (foreign outputs must be refused by each)."""
        return {key for _, key in self.golden_cases()} | {key for key, _ in self.rejected.values()}

    def all_keys(self) -> set[str]:
        return self.parser_keys() | {key for _, key, _ in self.also}


SUITES = (
    Suite(
        folder="amd-smi",
        outputs=("*.txt", "*.json"),
        cases={
            "version-24.7.1-rocm6.3.3.txt": "amd-smi-version",
            "version-json-26.2.2-rocm7.2.1-root.json": "amd-smi-version",
            "list-8gpu-mi300x-with-version-header-rocm6.1.2.txt": "amd-smi-list",
            "list-8gpu-mi300x-from-source.json": "amd-smi-list",
            "static-mi300a-doc-example-driver6.9.0-rc5-elided.txt": "amd-smi-static",
            "static-partition-mi300a-4apu-cpx-24-partitions.txt": "amd-smi-static",
            "static-json-mi300x-8gpu-amdsmi26.2.2-rocm7.2.1-sriov-ifwi-dell-ai-fixture.json": "amd-smi-static",
            "firmware-mi355x-gpu0-only-oci-pollara.txt": "amd-smi-firmware",
            "firmware-mi355x-gpu0-from-source.json": "amd-smi-firmware",
            "topology-2gpu-pcie-access-disabled.txt": "amd-smi-topology",
            "topology-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1-weight15.txt": "amd-smi-topology",
            "topology-2gpu-pcie-from-source.json": "amd-smi-topology",
            "topology-mi300x-8gpu-5tables-from-source.json": "amd-smi-topology",
            "partition-mi300a-4apu-spx-all-NA-rocm6.3.3.txt": "amd-smi-partition",
            "partition-mi300a-4apu-cpx-24-partitions-all-NA.txt": "amd-smi-partition",
            "xgmi-mi300x-8gpu-doc-example-amdsmi-changelog-rocm6.1.txt": "amd-smi-xgmi",
            "xgmi-metric-2navi-no-xgmi-fixed-NA-doc-example.txt": "amd-smi-xgmi",
            "xgmi-link-status-mi3x-8gpu-mvf-all-NA-doc-example.txt": "amd-smi-xgmi",
            "xgmi-source-status-mi3x-8gpu-mvf-all-NA-doc-example.txt": "amd-smi-xgmi",
            "static-json-list-schema-strix-halo-gfx1151-rocm6.3.1-go-test.json": "amd-smi-static",
            "list-json-strix-halo-gfx1151-rocm6.3.1-go-test.json": "amd-smi-list",
            "topology-mi355x-8gpu-9-tables-no-legend-rocm7.0.2-oci-pollara.txt": "amd-smi-topology",
            "version-26.0.2-inbox-driver-proc-version-rocm7.0.2.txt": "amd-smi-version",
            "version-json-26.2.2-no-render-group-file-error-from-source.txt": "amd-smi-version",
            "static-json-strix-halo-no-render-group-banner-from-source.txt": "amd-smi-static",
        },
        rejected={
            "xgmi-metric-2navi-no-xgmi-BUGGY-maxint-bitrate-doc-example.txt": ("amd-smi-xgmi", "cells run together"),
        },
        foreign=(
            "bad-pages-hex-1-retired-page-doc-example.txt",
            "default-mi300x-vf-1gpu-guest-amdsmi26.2.2-rocm7.2.4.txt",
            "metric-p-json-1gpu-doc-example-units-rocm6.1.json",
            "mi350x-8gpu-monitor-putm-rocm7.0.txt",
            "monitor-mi300a-4apu-gtt-usage-doc-example.txt",
            "monitor-mi300x-cpx-nps4-doc-example.txt",
            "monitor-watch-timestamp-mi300x-8gpu-under-stress.txt",
        ),
        also=tuple(
            (name, "amd-smi-monitor", ".thermal.expected.json")
            for name in (
                "mi350x-8gpu-monitor-putm-rocm7.0.txt",
                "monitor-watch-timestamp-mi300x-8gpu-under-stress.txt",
                "monitor-mi300a-4apu-gtt-usage-doc-example.txt",
            )
        ),
        corpus="amd-smi",
        corpus_glob="*",
    ),
    Suite(
        folder="rocm-smi",
        outputs=("*.txt", "*.json"),
        cases={
            "apu-0x164e-showfwinfo-section-of-a-fragment.txt": "rocm-smi",
            "legacy-2019-json-f-t-P-single-line.json": "rocm-smi",
            "mi100-6gpu-json-all-rocm5.7.1-telegraf.json": "rocm-smi",
            "mi210x3-mi50-mi100-mixed-5gpu-showallinfo-fru-corrupt-rocm5.4.txt": "rocm-smi",
            "mi300a-tpx-3partitions-showmeminfo-vram-rocm6.3.3.txt": "rocm-smi",
            "mi300x-qpx-4partitions-showmeminfo-vram-rocm6.3.3.txt": "rocm-smi",
            "mi300x-spx-showid-rocm6.3.3.txt": "rocm-smi",
            "mi308x-8gpu-use-meminfo-vram-rocm7.2.txt": "rocm-smi",
            "rx6700xt-json-all-rocm4.3.0-telegraf.json": "rocm-smi",
            "mi300a-4apu-showtopo-rocm7.1.1-tabs-trailing-spaces.txt": "rocm-smi-showtopo",
            "legacy-2019-default-table-rocm2.x-single-gpu.txt": "rocm-smi-concise",
            "mi300a-spx-concise-rocm6.3.3.txt": "rocm-smi-concise",
            "mi300a-tpx-3partitions-concise-rocm6.3.3.txt": "rocm-smi-concise",
            "mi300x-8gpu-concise-rocm6.2.3-ansi-caret-hung.txt": "rocm-smi-concise",
            "mi308x-8gpu-concise-rocm7.2.txt": "rocm-smi-concise",
            "rx7600xt-concise-rocm6.0.0-derived-header.txt": "rocm-smi-concise",
            "mi308x-8gpu-showtopo-low-power-warning-rocm7.2.txt": "rocm-smi-showtopo",
            "mi355x-8gpu-concise-trailing-tabs-under-load-rocm7.1.2-oci.txt": "rocm-smi-concise",
        },
        rejected={
            "error-driver-not-initialized-amdgpu-not-in-modules-4x-mi210-rocm6.2.3.txt": (
                "rocm-smi",
                "rocm-smi reported an error",
            ),
            "rx7600xt-concise-rows-only-unsupported-rocm6.0.0-fragment.txt": (
                "rocm-smi-concise",
                "concise table header",
            ),
        },
        also=tuple(
            (name, "rocm-smi-thermal", ".thermal.expected.json")
            for name in ("mi100-6gpu-json-all-rocm5.7.1-telegraf.json", "rx6700xt-json-all-rocm4.3.0-telegraf.json")
        ),
        corpus="rocm-smi",
        corpus_glob="*",
    ),
    Suite(
        folder="rocminfo",
        cases=lambda _: "rocminfo",
        shape=Shape.WRAPPED,
        views=lambda r: {"gpu_agents": [a.number for a in r.gpu_agents]} if isinstance(r, rocminfo.RocmInfo) else {},
        corpus="rocminfo",
    ),
    Suite(
        folder="lspci",
        cases=lambda _: "lspci",
        shape=Shape.WRAPPED,
        views=lambda r: {"pcie_links": to_jsonable(lspci.pcie_links(r))} if isinstance(r, lspci.LspciResult) else {},
        corpus="lspci",
    ),
    Suite(
        folder="sysfs",
        cases=_by_prefix((("kfd-", "kfd-properties"), ("uname-r-", "uname-r"), ("grep-", "sysfs-grep")), ""),
        shape=Shape.WRAPPED,
        views=_sysfs_views,
        corpus="sysfs",
    ),
    Suite(folder="dmesg", cases=lambda _: "dmesg", shape=Shape.WRAPPED, corpus="dmesg"),
    Suite(
        folder="ibv_devinfo",
        cases=_by_prefix(
            (
                ("ibstat-", "ibstat"),
                ("rdma-dev-", "rdma-dev"),
                ("rdma-link-", "rdma-link"),
                ("show_gids-", "show_gids"),
            ),
            "ibv_devinfo",
        ),
        shape=Shape.OR_ERROR,
    ),
    Suite(
        folder="rccl-tests",
        outputs=("*.txt", "*-from-source.json"),
        cases=lambda _: "rccl-tests",
        views=_rccl_views,
        rejected={
            "mi355x-8gpu-allreduce-512K-16G-rows-elided-oci-doc.txt": (
                "rccl-tests",
                "2 rows for float/sum; .* prints 16 per pass",
            ),
            "mi355x-8gpu-alltoall-512K-16G-rows-elided-oci-doc.txt": (
                "rccl-tests",
                "2 rows for float/none; .* prints 16 per pass",
            ),
        },
    ),
    Suite(folder="perftest", cases=lambda _: "ib_write_bw", views=_perftest_views),
    Suite(folder="rvs", cases=_by_prefix((("agfhc", "agfhc"),), "rvs"), views=_rvs_views),
    # NVIDIA (issue 30): the nvidia-smi subcommands share one folder, as in the corpus.
    Suite(
        folder="nvidia-smi",
        outputs=("*.txt", "*.xml"),
        cases=lambda name: "nvidia-smi-q-x" if name.endswith(".xml") else _nvidia_smi_key(name),
        rejected={"h100-dgx-topo-m-12nic-truncated.txt": ("nvidia-smi-topo", "header names 20 devices but 14 rows")},
        foreign=("h100-dgx-default-table-driver580-truncated.txt", "v100-pcie-default-table-driver560-under-load.txt"),
        corpus="nvidia-smi",
        corpus_glob="*",
    ),
    Suite(
        folder="dcgmi",
        cases=lambda _: "dcgmi-diag",
        rejected={
            "v100-pcie-diag-r2-dcgm3.3.9-truncated-last-line.txt": ("dcgmi-diag", "partial border line: output cut"),
            "fragment-deployment-error-row-remap-pending.txt": ("dcgmi-diag", "without its closing border"),
        },
        corpus="dcgmi",
    ),
    Suite(
        folder="dmesg-nvidia",
        cases=lambda _: "dmesg-nvidia",
        shape=Shape.WRAPPED,
        corpus="dmesg",
        corpus_glob="nvidia-*",
    ),
)


def cases_of(folder: str, key: str) -> list[str]:
    """The recorded outputs of `folder` whose golden is `key`'s (for a tool module's own asserts)."""
    suite = next(s for s in SUITES if s.folder == folder)
    return [name for name, k in suite.golden_cases() if k == key]


# Keys with no recorded output of their own to golden-test (their tool module tests them inline),
# with the seeds their property tests mutate.
SEEDS_ONLY: dict[str, tuple[Path, ...] | tuple[str, ...]] = {
    "host-files": tuple(sorted((FIXTURES / "host").glob("*.txt"))),
    # `readlink -f -- FILE` prints the resolved absolute path and a newline (coreutils).
    "readlink-rccl": ("/opt/rocm-7.2.0/lib/librccl.so.1.0.70200\n",),
    # nvidia-smi --query-gpu CSV (docs/vendors.md: no real capture of phase 2's query yet; the documented layout).
    "nvidia-smi-query-gpu": ("0, 00000000:1B:00.0, 33, 41, 69.85\n1, 00000000:43:00.0, 34, N/A, [N/A]\n",),
}

PINNED_KEYS = {
    "agfhc", "amd-smi-firmware", "amd-smi-list", "amd-smi-monitor", "amd-smi-partition", "amd-smi-static",
    "amd-smi-topology", "amd-smi-version", "amd-smi-xgmi", "dmesg", "host-files", "ib_write_bw", "ibstat",
    "ibv_devinfo", "kfd-properties", "lspci", "rccl-tests", "rdma-dev", "rdma-link", "readlink-rccl",
    "rocm-smi", "rocm-smi-concise", "rocm-smi-showtopo", "rocm-smi-thermal", "rocminfo", "rvs", "show_gids",
    "sysfs-grep", "uname-r",
    "dcgmi-diag", "dmesg-nvidia", "nvidia-smi-nvlink", "nvidia-smi-q-x", "nvidia-smi-topo", "nvidia-smi-query-gpu",
}  # fmt: skip
"""The registry's keys: `upgrade-gate parse --tool KEY` and the probe catalogue's parser keys."""


def _error(exc: ParseError) -> dict[str, Any]:
    return {"tool": exc.tool, "line_no": exc.line_no, "message": exc.message}


def _golden_value(suite: Suite, key: str, text: str) -> object:
    if suite.shape is Shape.PLAIN:
        return to_jsonable(PARSERS[key](text))
    try:
        result = PARSERS[key](text)
    except ParseError as exc:
        return {"error": _error(exc)} if suite.shape is Shape.WRAPPED else {"ParseError": _error(exc)}
    views = suite.views(result)
    return {"result": to_jsonable(result), **views} if suite.shape is Shape.WRAPPED else to_jsonable(result)


def _read(suite: Suite, name: str) -> str:
    return (suite.path / name).read_text(encoding="utf-8")


GOLDEN_CASES = [
    *(pytest.param(s, n, k, ".expected.json", id=f"{s.folder}/{n}") for s in SUITES for n, k in s.golden_cases()),
    *(pytest.param(s, n, k, suffix, id=f"{s.folder}/{n}:{k}") for s in SUITES for n, k, suffix in s.also),
]
REJECTED_CASES = [pytest.param(s, n, *s.rejected[n], id=f"{s.folder}/{n}") for s in SUITES for n in s.rejected]
FOREIGN_CASES = [
    pytest.param(s, n, k, id=f"{s.folder}/{n}:{k}") for s in SUITES for n in s.foreign for k in sorted(s.parser_keys())
]


@pytest.mark.parametrize(("suite", "name", "key", "suffix"), GOLDEN_CASES)
def test_parser_matches_golden(suite: Suite, name: str, key: str, suffix: str, update_goldens: bool) -> None:
    golden = suite.path / (Path(name).stem + suffix)
    check_golden(golden, _golden_value(suite, key, _read(suite, name)), update_goldens)


@pytest.mark.parametrize(("suite", "name", "key", "message"), REJECTED_CASES)
def test_parser_refuses_broken_real_output(suite: Suite, name: str, key: str, message: str) -> None:
    with pytest.raises(ParseError, match=message) as info:
        PARSERS[key](_read(suite, name))
    assert info.value.tool and info.value.line_no > 0  # the refusal names the line


@pytest.mark.parametrize(("suite", "name", "key"), FOREIGN_CASES)
def test_parser_refuses_other_commands_output(suite: Suite, name: str, key: str) -> None:
    with pytest.raises(ParseError):
        PARSERS[key](_read(suite, name))


@pytest.mark.parametrize("suite", SUITES, ids=lambda s: s.folder)
def test_every_recorded_output_is_tested_and_corpus_copies_are_unchanged(suite: Suite) -> None:
    names = suite.output_names()
    untested = [n for n in names if suite.key_of(n) is None and n not in suite.rejected and n not in suite.foreign]
    assert not untested, f"{suite.folder}: outputs with no parser key, refusal or foreign entry: {untested}"
    assert all(suite.key_of(n) in PARSERS for n in names if suite.key_of(n) is not None)
    if isinstance(suite.cases, Mapping):
        assert set(suite.cases) <= set(names), f"{suite.folder}: cases without a file"
    assert set(suite.rejected) | set(suite.foreign) <= set(names)
    assert {name for name, _, _ in suite.also} <= set(names)
    if suite.corpus is not None and CORPUS.is_dir():
        corpus = sorted((CORPUS / suite.corpus).glob(suite.corpus_glob))
        assert corpus, f"corpus folder {suite.corpus} missing"
        for path in corpus:
            assert path.name in names, f"corpus file {path.name} has no test"
            assert (suite.path / path.name).read_bytes() == path.read_bytes(), f"{path.name} differs from the corpus"


def test_registry_holds_the_pinned_keys_and_each_has_recorded_outputs() -> None:
    assert set(PARSERS) == PINNED_KEYS
    tested = set().union(*(s.all_keys() for s in SUITES))
    assert tested | set(SEEDS_ONLY) == PINNED_KEYS
    assert not tested & set(SEEDS_ONLY)


# --------------------------------------------------------------------------------- mutations


@functools.cache
def _seeds(key: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(texts, JSON documents) a key's property tests mutate: every recorded output of its suite, so
    each parser also meets the other commands' outputs of its tool."""
    if key in SEEDS_ONLY:
        texts = tuple(s.read_text(encoding="utf-8") if isinstance(s, Path) else s for s in SEEDS_ONLY[key])
        return texts, ()
    suite = next(s for s in SUITES if key in s.all_keys())
    texts: list[str] = []
    jsons: list[str] = []
    for name in suite.output_names():
        text = _read(suite, name)
        if name.endswith(".json"):
            with contextlib.suppress(ValueError):
                json.loads(text)
                jsons.append(text)
            if len(text) >= 10_000:
                continue  # nearly every character edit of a large document only breaks JSON syntax
        texts.append(text)
    return tuple(texts), tuple(jsons)


def _views(key: str) -> Callable[[object], dict[str, Any]]:
    return next((s.views for s in SUITES if key in s.parser_keys()), lambda _: {})  # views: own keys only


def _returns_or_raises_parse_error(key: str, text: str) -> None:
    with contextlib.suppress(ParseError):
        _views(key)(PARSERS[key](text))


_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("key", sorted(PINNED_KEYS))
@_SETTINGS
@given(data=st.data())
def test_parser_mutated_output_returns_or_raises_parse_error(key: str, data: st.DataObject) -> None:
    texts, _ = _seeds(key)
    text = data.draw(st.one_of(mutated_lines(texts), mutated_text(list(texts)), edited_text(texts)))
    _returns_or_raises_parse_error(key, text)


@pytest.mark.parametrize("key", sorted(k for k in PINNED_KEYS if _seeds(k)[1]))
@_SETTINGS
@given(data=st.data())
def test_parser_mutated_json_returns_or_raises_parse_error(key: str, data: st.DataObject) -> None:
    _returns_or_raises_parse_error(key, data.draw(mutated_json(list(_seeds(key)[1]))))


@pytest.mark.parametrize("key", sorted(PINNED_KEYS))
@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=400))
def test_parser_random_text_returns_or_raises_parse_error(key: str, text: str) -> None:
    _returns_or_raises_parse_error(key, text)


@pytest.mark.parametrize("key", sorted(PINNED_KEYS))
def test_parser_unmutated_seeds_return_or_raise_parse_error(key: str) -> None:
    for text in _seeds(key)[0]:
        _returns_or_raises_parse_error(key, text)


@pytest.mark.parametrize("text", ["²", "٣", "12³", "¹²"])
def test_parsers_digit_checks_take_ascii_digits_only(text: str) -> None:
    """`str.isdigit` takes superscripts and other scripts' digits, which `int` refuses or reads as a number
    no tool printed: a mutated rocm-smi table with a "²" row raised ValueError (found by the property test
    above). Every parser's digit check is `parse.common.digits`, ASCII only."""
    from upgrade_gate.parse.common import digits

    assert text.isdigit() and not digits(text)
    assert digits("0") and digits("123") and not digits("") and not digits("-1")


def test_parser_found_examples_raise_parse_error() -> None:
    """The property tests' finds, pinned: a rocm-smi concise table with a "²" line, and an amd-smi static
    size of 1.7e302 MB, are ParseErrors (they were ValueError and OverflowError: exit 70)."""
    texts, _ = _seeds("rocm-smi-concise")
    table = next(t for t in texts if "Concise Info" in t and "(Junction)" in t)
    lines = table.splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("Device")) + 1
    with pytest.raises(ParseError):
        PARSERS["rocm-smi-concise"]("".join([*lines[:at], "²\n", *lines[at:]]))
    _, docs = _seeds("amd-smi-static")
    sized = next(d for d in docs if re.search(r'"size": \{\s*"value": \d+', d))
    huge = re.sub(r'("size": \{\s*"value": )\d+', r"\g<1>1.7e302", sized, count=1)
    assert huge != sized
    with pytest.raises(ParseError, match="out of range"):
        PARSERS["amd-smi-static"](huge)
