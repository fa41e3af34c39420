"""Parser for `nvidia-smi nvlink -s` (`--status`): every GPU's NVLink links and their speeds.

Design notes and tool quirks:
- One block per GPU: `GPU <n>: <name> (UUID: GPU-...)`, then one indented `Link <k>: <speed> GB/s` or
  `Link <k>: <inactive>` line per link (tab and a space in nvidia-smi's own output). A GPU whose links
  are all down prints no link lines but NVML's message `NVML: Unable to retrieve NVLink information as all
  links are inActive` (sic; fixture nvidia-smi/rtxa6000x3-nvlink-s-..., siboehm/bench): that GPU is
  recorded with `all_inactive`, never as "no links, nothing to judge".
- A GPU block with neither link lines nor that message is a cut capture: ParseError. So is a link line
  before any GPU, a link named twice, a GPU index out of order, or any other line (a wrapped GPU name, a
  prompt): the evidence is the link count, and a guess would hide a lost link.
- Sanity caps: at most 64 links per GPU and 1,024 GPUs (16 MiB of link lines peaked at 698 MB before).
- nvidia-smi's failure messages (no driver, no devices, NVML mismatch) are refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from upgrade_gate.errors import ParseError
from upgrade_gate.parse.common import strip_ansi
from upgrade_gate.parse.nvidia_smi_messages import refuse_messages

TOOL = "nvidia-smi-nvlink"

_GPU_RE = re.compile(
    r"^GPU (?P<index>\d{1,4}): (?P<name>.+) "
    r"\(UUID: (?P<uuid>GPU-[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})\)$"
)
_LINK_RE = re.compile(
    r"^\s+Link (?P<link>\d{1,3}): (?:(?P<speed>\d{1,6}(?:\.\d{1,6})?) GB/s|(?P<inactive><inactive>))$"
)
MAX_LINKS = 64  # per GPU (18 on H100/B200): sanity caps, so 16 MiB of link lines stay cheap
MAX_GPUS = 1024
_ALL_INACTIVE = "NVML: Unable to retrieve NVLink information as all links are inActive"


@dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkLink:
    """One link of a GPU: its number and speed (None when `<inactive>`)."""

    link: int
    speed_gbs: float | None  # GB/s per direction as printed ("26.562 GB/s" on H100)

    @property
    def active(self) -> bool:
        """True for a link that printed a speed."""
        return self.speed_gbs is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkGpu:
    """One GPU block of `nvidia-smi nvlink -s`."""

    index: int
    name: str
    uuid: str
    links: tuple[NvlinkLink, ...] = ()
    all_inactive: bool = False  # NVML reported every link down (no link lines printed)

    @property
    def active_links(self) -> int:
        """How many links printed a speed."""
        return sum(1 for link in self.links if link.active)


@dataclass(frozen=True, slots=True, kw_only=True)
class NvlinkStatus:
    """`nvidia-smi nvlink -s`: the GPUs in printed order."""

    gpus: tuple[NvlinkGpu, ...]


class _Block:
    def __init__(self, index: int, name: str, uuid: str, line_no: int, line: str) -> None:
        self.index, self.name, self.uuid, self.line_no, self.line = index, name, uuid, line_no, line
        self.links: list[NvlinkLink] = []
        self.all_inactive = False

    def close(self) -> NvlinkGpu:
        if not self.links and not self.all_inactive:
            raise ParseError(TOOL, self.line_no, self.line, f"GPU {self.index} has no link lines: output cut")
        return NvlinkGpu(
            index=self.index, name=self.name, uuid=self.uuid, links=tuple(self.links), all_inactive=self.all_inactive
        )


def parse_nvidia_smi_nvlink(text: str) -> NvlinkStatus:
    """Parse `nvidia-smi nvlink -s` into an `NvlinkStatus`; ParseError naming the line at fault."""
    lines = strip_ansi(text).splitlines()
    if _ALL_INACTIVE not in text:
        refuse_messages(lines, TOOL)
    gpus: list[NvlinkGpu] = []
    block: _Block | None = None
    for no, raw in enumerate(lines, 1):
        line = raw.rstrip()
        if not line.strip():
            continue
        gpu, link = _GPU_RE.match(line), _LINK_RE.match(line)
        if gpu is not None:
            if block is not None:
                gpus.append(block.close())
            index = int(gpu.group("index"))
            if len(gpus) >= MAX_GPUS:
                raise ParseError(TOOL, no, line, f"more than {MAX_GPUS} GPUs")
            if gpus and index <= gpus[-1].index:
                raise ParseError(TOOL, no, line, f"GPU {index} after GPU {gpus[-1].index}")
            block = _Block(index, gpu.group("name").strip(), gpu.group("uuid"), no, line)
        elif link is not None and block is not None and not block.all_inactive:
            number = int(link.group("link"))
            if len(block.links) >= MAX_LINKS:
                raise ParseError(TOOL, no, line, f"GPU {block.index} has more than {MAX_LINKS} links")
            if any(existing.link == number for existing in block.links):
                raise ParseError(TOOL, no, line, f"GPU {block.index} link {number} printed twice")
            speed = link.group("speed")
            block.links.append(NvlinkLink(link=number, speed_gbs=float(speed) if speed is not None else None))
        elif line.strip() == _ALL_INACTIVE and block is not None and not block.links and not block.all_inactive:
            block.all_inactive = True
        else:
            raise ParseError(TOOL, no, line, "not a GPU, link or NVML line of `nvidia-smi nvlink -s`")
    if block is None:
        raise ParseError(TOOL, 0, "", "no GPU block: empty output")
    gpus.append(block.close())
    return NvlinkStatus(gpus=tuple(gpus))


PARSERS: dict[str, Callable[[str], object]] = {TOOL: parse_nvidia_smi_nvlink}
