"""Parser gaps a black-box tester found (brk14 parse findings 07, 12, 14, 15): each must BLOCK, never PASS.

Every case starts from a capture of a healthy fake node (the fake tools print the real formats of the
corpus, as in tests/test_snapshot_evidence.py) and changes one probe's recorded output exactly the way the
finding's mutated bundle did; the inline texts are those bundles' lines, trimmed to what a test needs, and
each is a MUTATION of a real output, said where it is used:
- 12: `rdma link show` with the `ionic_3/1` line printed a second time;
- 14: sysfs `grep -H .` of `sriov_numvfs` reading `N/A` (line 3 of the probe's output);
- 15: lspci `LnkSta: Speed 32GT/s (ok), Width x16\\xff (ok)`, the byte decoded as the bundle reader does
  (`errors="replace"`);
- 07: lspci `LnkSta: Speed unknown (ok), Width x16 (ok)` for GPU 0000:05:00.0 (pciutils ls-caps.c
  `link_speed` prints `unknown` for a speed code it does not know), on one side or both.
"""

from __future__ import annotations

import re

import pytest

from tests.capture_support import healthy_capture, stdout_of, with_stdout
from upgrade_gate.collect.bundle import Bundle
from upgrade_gate.errors import ParseError
from upgrade_gate.judge.judge import judge
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Finding, NodeName, Severity, Snapshot, Verdict
from upgrade_gate.parse.lspci import parse_lspci
from upgrade_gate.parse.rdma import parse_rdma_link
from upgrade_gate.parse.sysfs import parse_sysfs_grep
from upgrade_gate.snapshot.build import build_snapshot

POLICY = load_policy()
GPU = "0000:05:00.0"


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Bundle:
    return healthy_capture(tmp_path_factory.mktemp("node"))


def _blocking(baseline: Snapshot, candidate: Snapshot) -> list[Finding]:
    report = judge(
        baselines={NodeName("gpu-node-01"): baseline},
        candidates=[candidate],
        plan=None,
        policy=POLICY,
        now="2026-12-01T12:00:00Z",
    )
    blocking = [f for f in report.findings if f.severity is Severity.BLOCK]
    assert (report.verdict is Verdict.BLOCK) == bool(blocking)
    return blocking


# --------------------------------------------------------------------------- 12: rdma link, a DEV/PORT twice

# MUTATION of the finding's rdma_link.stdout (itself the fake node's `rdma link show` in iproute2's 2024 format,
# trailing space included): the ionic_3 line printed a second time, after ionic_7; trimmed to four lines.
RDMA_LINK_TWICE = (
    "link ionic_2/1 state ACTIVE physical_state LINK_UP netdev enp102s0np0 \n"
    "link ionic_3/1 state ACTIVE physical_state LINK_UP netdev enp118s0np0 \n"
    "link ionic_7/1 state ACTIVE physical_state LINK_UP netdev enp246s0np0 \n"
    "link ionic_3/1 state ACTIVE physical_state LINK_UP netdev enp118s0np0 \n"
)


def test_rdma_link_same_device_port_twice_is_a_parse_error_naming_the_line() -> None:
    with pytest.raises(ParseError, match=r"ionic_3/1 printed twice \(first at line 2\)") as info:
        parse_rdma_link(RDMA_LINK_TWICE)
    assert info.value.line_no == 4


def test_rdma_link_same_port_twice_blocks_the_node_naming_the_probe(healthy: Bundle) -> None:
    links = stdout_of(healthy, "rdma_link")
    line = next(x for x in links.splitlines(keepends=True) if x.startswith("link ionic_3/1 "))
    snap = build_snapshot(with_stdout(healthy, "rdma_link", links + line))
    probe = next(p for p in snap.probes if p.name == "rdma_link")
    assert not probe.ok and "ionic_3/1 printed twice" in (probe.reason or "")
    assert any(
        "rdma_link" in f.message and "printed twice" in f.message for f in _blocking(build_snapshot(healthy), snap)
    )


# --------------------------------------------------------------------------- 14: sysfs sriov_numvfs N/A

# MUTATION of the finding's sysfs_sriov.stdout (`grep -H .` of the fake node's sysfs files, host root
# shortened to /sys): the third PF's sriov_numvfs reads N/A; trimmed to four lines.
SRIOV_NA = (
    "/sys/bus/pci/devices/0000:06:00.0/sriov_numvfs:0\n"
    "/sys/bus/pci/devices/0000:16:00.0/sriov_numvfs:0\n"
    "/sys/bus/pci/devices/0000:66:00.0/sriov_numvfs:N/A\n"
    "/sys/bus/pci/devices/0000:66:00.0/sriov_totalvfs:16\n"
)


def test_sysfs_sriov_numvfs_na_is_a_parse_error_of_the_probe_output() -> None:
    with pytest.raises(ParseError, match="expected a decimal integer") as info:
        parse_sysfs_grep(SRIOV_NA)
    assert info.value.line_no == 3


def test_sysfs_sriov_numvfs_na_blocks_the_node_naming_the_probe_instead_of_aborting(healthy: Bundle) -> None:
    text, count = re.subn(r"(/0000:66:00\.0/sriov_numvfs:)\d+", r"\1N/A", stdout_of(healthy, "sysfs_sriov"))
    assert count == 1
    snap = build_snapshot(with_stdout(healthy, "sysfs_sriov", text))  # raised ParseError out of the build before
    probe = next(p for p in snap.probes if p.name == "sysfs_sriov")
    assert not probe.ok and "expected a decimal integer" in (probe.reason or "")
    assert snap.sriov == ()
    assert any("sysfs_sriov" in f.message for f in _blocking(build_snapshot(healthy), snap))


# --------------------------------------------------------------------------- 15: a corrupt byte in LnkSta

# MUTATION of the finding's lspci.stdout (the fake node's `lspci -D -nn -vvv`, pciutils >= 3.6 layout): a 0xff
# byte after the LnkSta width; trimmed to the header and the Express capability's link lines.
LSPCI_HEAD = (
    f"{GPU} Processing accelerators [1200]: Advanced Micro Devices, Inc. [AMD/ATI] Aqua Vanjaram "
    "[Instinct MI300X] [1002:74a1]\n"
    "\tCapabilities: [60] Express (v2) Endpoint, MSI 00\n"
    "\t\tLnkCap:\tPort #0, Speed 32GT/s, Width x16, ASPM not supported\n"
)
CORRUPT = b"\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16\xff (ok)\n".decode("utf-8", errors="replace")


def test_lspci_corrupt_byte_after_the_lnksta_width_is_a_parse_error() -> None:
    assert "x16\ufffd (ok)" in CORRUPT
    with pytest.raises(ParseError, match="malformed LnkSta") as info:
        parse_lspci(LSPCI_HEAD + CORRUPT)
    assert info.value.line_no == 4


def test_lspci_corrupt_byte_after_the_lnkcap_width_is_a_parse_error() -> None:
    head = LSPCI_HEAD.replace("Width x16, ASPM", "Width x16\ufffd, ASPM")
    with pytest.raises(ParseError, match="malformed LnkCap"):
        parse_lspci(head + "\t\tLnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)\n")


def test_lspci_lnksta_of_pciutils_35_with_its_flags_on_the_same_line_still_parses() -> None:
    # pciutils 3.5.0 ls-caps.c cap_express_link: "\t\tLnkSta:\tSpeed %s, Width x%d, TrErr%c Train%c SlotClk%c
    # DLActive%c BWMgmt%c ABWMgmt%c\n" (later releases print the flags on the next line).
    text = LSPCI_HEAD + "\t\tLnkSta:\tSpeed 8GT/s, Width x16, TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-\n"
    (dev,) = parse_lspci(text).devices
    assert dev.link_status is not None and (dev.link_status.speed_gts, dev.link_status.width) == (8.0, 16)


def test_lspci_corrupt_lnksta_byte_blocks_the_node_naming_the_probe(healthy: Bundle) -> None:
    text, count = re.subn(
        r"(LnkSta:\tSpeed 32GT/s \(ok\), Width x16)( \(ok\))", "\\1\ufffd\\2", stdout_of(healthy, "lspci"), count=1
    )
    assert count == 1
    snap = build_snapshot(with_stdout(healthy, "lspci", text))
    probe = next(p for p in snap.probes if p.name == "lspci")
    assert not probe.ok and "malformed LnkSta" in (probe.reason or "")
    assert any("lspci" in f.message for f in _blocking(build_snapshot(healthy), snap))


# --------------------------------------------------------------------------- 07: LnkSta "Speed unknown"


def _speed_unknown(bundle: Bundle) -> Bundle:
    """GPU 0000:05:00.0's LnkSta as the finding's bundles printed it: `Speed unknown (ok), Width x16 (ok)`."""
    text = stdout_of(bundle, "lspci")
    start = text.index(f"{GPU} ")
    end = text.find("\n0000:", start)
    block = text[start:end]
    edited = block.replace("LnkSta:\tSpeed 32GT/s (ok), Width x16 (ok)", "LnkSta:\tSpeed unknown (ok), Width x16 (ok)")
    assert edited != block
    return with_stdout(bundle, "lspci", text[:start] + edited + text[end:])


def test_lspci_speed_unknown_is_parsed_as_no_speed() -> None:
    (dev,) = parse_lspci(LSPCI_HEAD + "\t\tLnkSta:\tSpeed unknown (ok), Width x16 (ok)\n").devices
    assert dev.link_status is not None and (dev.link_status.speed_gts, dev.link_status.width) == (None, 16)


@pytest.mark.parametrize(
    ("baseline_unknown", "candidate_unknown"),
    [(True, True), (False, True), (True, False)],
    ids=["both", "now", "before"],
)
def test_pcie_speed_unknown_blocks_on_either_side_naming_lspci(
    healthy: Bundle, baseline_unknown: bool, candidate_unknown: bool
) -> None:
    unknown = build_snapshot(_speed_unknown(healthy))
    known = build_snapshot(healthy)
    link = next(lk for lk in unknown.pcie if lk.bdf == GPU)
    assert (link.speed_gts, link.width) == (None, 16)
    baseline = unknown if baseline_unknown else known
    candidate = unknown if candidate_unknown else known
    (f,) = [f for f in _blocking(baseline, candidate) if f.rule == "pcie.downgrade"]
    assert f.device == GPU and f.evidence == "lspci"
    assert "lspci printed 'Speed unknown'" in f.message
    if candidate_unknown:
        assert "so the link cannot be judged" in f.message
    if baseline_unknown:
        assert "in the baseline lspci printed 'Speed unknown'" in f.message


# --------------------------------------------------------------------------- ibv_devinfo speed and width (06, 06b)
# libibverbs' devinfo prints active_width from 1X/2X/4X/8X/12X or "invalid width", and active_speed as
# "<n> Gbps" or "invalid speed" (its `width_str`/`speed_str` tables); the corpus has "50.0 Gbps (64)",
# "4X (2)" and "invalid speed (0)" (ibv_devinfo/cx6-2port-ib-vv-one-port-down-disabled.txt). The values
# below are MUTATIONS of the fake node's real-format line, as the tester's bundles had them.


@pytest.mark.parametrize("speed", ["N/A", "100000.0 Mbps (4)", "FOO", "400 Gb/s"])
def test_ibv_devinfo_active_speed_it_never_prints_is_a_parse_error_and_blocks(healthy: Bundle, speed: str) -> None:
    text = stdout_of(healthy, "ibv_devinfo")
    line = re.search(r"active_speed:[ \t]*(.+)", text)
    assert line is not None
    snap = build_snapshot(with_stdout(healthy, "ibv_devinfo", text.replace(line.group(1), speed, 1)))
    probe = next(p for p in snap.probes if p.name == "ibv_devinfo")
    assert not probe.ok and "active_speed is not one ibv_devinfo prints" in (probe.reason or "")
    report = judge(
        baselines={NodeName("gpu-node-01"): build_snapshot(healthy)},
        candidates=[snap],
        plan=None,
        policy=POLICY,
        now="2026-12-01T12:00:00Z",
    )
    assert report.verdict is Verdict.BLOCK


def test_ibv_devinfo_active_width_it_never_prints_is_a_parse_error(healthy: Bundle) -> None:
    text = stdout_of(healthy, "ibv_devinfo")
    line = re.search(r"active_width:[ \t]*(.+)", text)
    assert line is not None
    snap = build_snapshot(with_stdout(healthy, "ibv_devinfo", text.replace(line.group(1), "N/A", 1)))
    probe = next(p for p in snap.probes if p.name == "ibv_devinfo")
    assert not probe.ok and "active_width is not one ibv_devinfo prints" in (probe.reason or "")
