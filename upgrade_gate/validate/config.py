"""CVF's `cluster-validation-config` ConfigMap as a typed `CvfConfig`, plus upgrade-gate's own keys.

`load_cvf_config(path)` reads a YAML file that is either a whole ConfigMap manifest (`kind: ConfigMap`
with `data:`) or a plain `KEY: value` mapping; `parse_cvf_config(mapping, source=...)` is the pure part,
for the judge's policy to reuse. `read_cvf_values(path)` is the one reader of such a file, for
`validate --config` and `gate --cvf-config` alike (`cvf_values` the one unwrapping rule): a document
with `kind` or `apiVersion` is a manifest and must be a ConfigMap; anything else is the mapping itself.
Defaults are the shipped ConfigMap's (ROCm/gpu-operator
example/gpu-validation-cluster/configs/cluster-validation-config.yaml @867693854c8c).

Which keys are checked (a decision, documented here because the real ConfigMap has dozens of keys):
- Keys upgrade-gate reads are typed; a malformed value is a `ConfigError` naming the key and the file.
- `UPGRADE_GATE_*` keys are ours: an unknown one (a typo) is a `ConfigError`.
- An unknown key that looks like a threshold or a skip flag (`PHASE<N>...`, `SKIP_...`) is a
  `ConfigError` too, so `PHASE2_BW_TRESHOLD: "200"` cannot silently leave the default in force.
- CVF's plumbing (scripts, env blocks, images, MPIJob and NAD settings: `KNOWN_CVF_KEYS` and any key
  ending in `_SCRIPT` / `_ENV_VARS`) is accepted and listed in `CvfConfig.ignored_keys`.
- Inside `TESTS_JSON` and `GPU_VALIDATION_STAGES_JSON` the keys are CVF's own and closed (jq reads them
  case-sensitively, so `"skip"` or `"Iteratons"` would be dropped by CVF too): an unknown key, a test
  name that is not an rccl-tests program (`RCCL_TESTS`), a test or stage name listed twice, and an
  empty test list while phase 5 runs are `ConfigError`s naming the entry, so a typo cannot leave
  all_reduce_perf without its threshold or a stage without its setting.

upgrade-gate's additions (all optional):
| key | meaning |
|---|---|
| `UPGRADE_GATE_NIC_FIRMWARE` | expected `fw_ver` of every AINIC (exact match) |
| `UPGRADE_GATE_NIC_PCIE_GEN` / `UPGRADE_GATE_NIC_PCIE_WIDTH` | expected PCIe generation (1-6) / width of every AINIC |
| `UPGRADE_GATE_NIC_VF_COUNT` | expected `sriov_numvfs` of every AINIC PF |
| `UPGRADE_GATE_PHASE<N>_TIMEOUT_S` | budget of phase N in seconds (default: derived from CVF's wait times) |
| `UPGRADE_GATE_SAMPLES` | repeats of the phase 2 / phase 5 sweeps (default 5; CVF runs once) |
| `UPGRADE_GATE_RVS_CONF_DIR` | folder of RVS `.conf` files for phase-1 RVS recipes |
| `UPGRADE_GATE_PHASE4_SERVER_START_S` | seconds the `ib_write_bw` server gets before its client starts |
| `UPGRADE_GATE_WORKLOAD_*` | phases 6-7 (docs/workload.md): COMMAND STEPS WARMUP BATCH NPROC TIMEOUT_S VISIBLE_VAR |
| `UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S` | seconds between phase 6's `amd-smi monitor -u` samples (default 2) |
| `UPGRADE_GATE_WORKLOAD_IMAGE` | image of the phase 6-7 Jobs on Kubernetes (docs/workload.md) |

SKIP_* semantics: CVF labels a skipped phase `passed` and lets the node continue. upgrade-gate lets the
node continue too (the flag is the operator saying the phase may be skipped) but records the phase as
`skipped`, which is never a pass for the judge or the exit code (see pipeline.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from upgrade_gate import docio
from upgrade_gate.errors import ConfigError
from upgrade_gate.validate import config_values as cv
from upgrade_gate.validate import cvf

SKIP_FLAGS: Mapping[str, int] = {
    "SKIP_GPU_HW_ACCEPTANCE": 1,
    "SKIP_GPU_MESH_VALIDATION": 2,
    "SKIP_NIC_VALIDATION": 3,
    "SKIP_RAIL_BANDWIDTH_TEST": 4,
    "SKIP_RCCL_TEST": 5,
    "SKIP_GPU_VALIDATION": 1,  # 2025 CVF name of the phase-1 flag (config.json skip-gpu-validation)
}
"""CVF skip flag -> the phase it skips."""

KNOWN_CVF_KEYS = frozenset(
    {
        "LOG_STORE_NODE_NAME", "JOB_NAME", "LAUNCHER_REPLICAS", "PF_NIC_PER_WORKER", "VF_NIC_PER_WORKER",
        "NODE_VALIDATION_INTERVAL_MINS", "PF_NIC_NAD_NAME", "VF_NIC_NAD_NAME", "CANDIDATE_LABEL",
        "SUCCESS_LABEL", "FAILURE_LABEL", "TIMESTAMP_ANNOTATION", "DEBUG_DELAY", "WAIT_FOR_WORKERS",
        "ENABLE_SSH_CHECK", "WORKER_READY_TIMEOUT", "SSH_CHECK_INTERVAL", "SSH_CHECK_TIMEOUT",
        "PHASE3_ANNOTATION_MAX_BYTES", "PHASE4_NAD_NAME_PREFIX", "PHASE4_MAX_CONCURRENT_PAIRS",
        "PHASE4_STATE_DIR", "GPU_PER_WORKER",
    }
)  # fmt: skip
"""CVF keys that configure its Kubernetes plumbing, accepted and ignored by the local pipeline."""

RCCL_TESTS = frozenset(
    f"{name}_perf"
    for name in (
        "all_gather", "all_reduce", "alltoall", "alltoallv", "broadcast", "gather", "hypercube", "reduce",
        "reduce_scatter", "scatter", "sendrecv",
    )
)  # fmt: skip
"""The rccl-tests programs a `TESTS_JSON` entry may name (ROCm/rccl-tests src/CMakeLists.txt `add_rccl_test`
and src/Makefile `BIN_FILES_LIST`, 2024: each `<name>` builds `<name>_perf`)."""

_TEST_KEYS = ("name", "threshold")
_STAGE_KEYS = ("Name", "Image", "Framework", "Recipe", "TimeoutSeconds", "Iterations", "Arguments", "Skip")
# CVF's documented stage fields (cluster-validation-config.yaml @867693854c8c, "Required per-stage fields"
# and "Optional per-stage"); `Image` is CVF's test-runner image, checked as text and not used locally.
_PLUMBING_SUFFIXES = ("_SCRIPT", "_ENV_VARS")
_CHECKED_PREFIX = re.compile(r"^(PHASE\d|SKIP_|UPGRADE_GATE_)")
_LABEL_KEY_RE = re.compile(r"PHASE[1-5]_LABEL_KEY")
_PCIE_GEN_GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}

DEFAULT_STAGES_JSON = (
    '[{"Name": "gpu-stress", "Framework": "RVS", "Recipe": "gst_single", "Iterations": 1,'
    ' "TimeoutSeconds": 1800, "Arguments": "--parallel"},'
    ' {"Name": "xgmi-lvl1", "Framework": "AGFHC", "Recipe": "xgmi_lvl1", "Iterations": 1, "TimeoutSeconds": 300},'
    ' {"Name": "pcie-lvl1", "Framework": "AGFHC", "Recipe": "pcie_lvl1", "Iterations": 1, "TimeoutSeconds": 300},'
    ' {"Name": "hbm-lvl1", "Framework": "AGFHC", "Recipe": "hbm_lvl1", "Iterations": 1, "TimeoutSeconds": 300}]'
)
DEFAULT_TESTS_JSON = (
    '{"tests": [{"name": "all_reduce_perf", "threshold": 5}, {"name": "broadcast_perf", "threshold": 5},'
    ' {"name": "reduce_scatter_perf", "threshold": 5.0}]}'
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stage:
    """One phase-1 recipe (an entry of CVF's GPU_VALIDATION_STAGES_JSON)."""

    name: str
    framework: str  # "RVS" / "AGFHC"
    recipe: str
    timeout_s: float
    iterations: int = 1
    arguments: str = ""  # test-runner arguments, recorded only (see phases/acceptance.py)
    skip: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class CvfConfig:
    """Every threshold and switch the phases read, typed, with CVF's defaults."""

    source: str = "(defaults)"
    phase2_bw_threshold: float = 100.0  # GB/s, "# Avg bus bandwidth"
    phase2_start_msg_size: str = "1K"
    phase2_end_msg_size: str = "2G"
    phase2_start_bytes: int = 1 << 10
    phase2_end_bytes: int = 2 << 30
    phase2_step_factor: int = 2
    phase2_iter_count: int = 6
    phase2_warmup_iter_count: int = 20
    phase2_job_wait_s: float = 600.0
    phase3_expected_nic_count: int = 8
    phase3_amd_nic_pci_ids: tuple[str, ...] = ("1dd8:1002",)
    phase3_min_gid_count: int = 1
    phase3_job_wait_s: float = 120.0
    phase3_fw_check_enabled: bool = True
    phase3_fw_strict: bool = True
    roce_workload_image: str = ""
    phase4_rail_count: int = 8
    phase4_bw_threshold: float = 380.0  # Gb/s, ib_write_bw "BW average"
    phase4_pair_wait_s: float = 180.0  # per (pair, rail)
    phase4_ib_dev_prefix: str = "rdma_dev_"
    phase5_min_workers: int = 2
    mpijob_wait_s: float = 240.0
    slots_per_worker: int = 8
    worker_replicas: int = 2
    node_selector_labels: tuple[tuple[str, str], ...] = ((cvf.NFD_AMD_GPU, "true"),)
    rccl_thresholds: dict[str, float] = field(
        default_factory=lambda: {"all_reduce_perf": 5.0, "broadcast_perf": 5.0, "reduce_scatter_perf": 5.0}
    )
    stages: tuple[Stage, ...] = ()
    skip: frozenset[int] = frozenset()  # phases switched off by a SKIP_* flag
    skip_flags: dict[int, str] = field(default_factory=dict)  # phase -> the flag that switched it off
    label_keys: dict[int, str] = field(default_factory=lambda: dict(cvf.PHASE_LABELS))
    failure_reason_suffix: str = cvf.FAILURE_REASON_SUFFIX
    # upgrade-gate's own keys
    nic_firmware: str | None = None
    nic_pcie_gen: int | None = None
    nic_pcie_width: int | None = None
    nic_vf_count: int | None = None
    phase_timeouts_s: dict[int, float] = field(default_factory=dict)
    samples: int = 5
    rvs_conf_dir: str = "/opt/rocm/share/rocm-validation-suite/conf"
    phase4_server_start_s: float = 1.0
    workload_command: str = ""  # empty: the shipped reference_train.py under torchrun
    workload_steps: int = 30
    workload_warmup: int = 5
    workload_batch: int = 32
    workload_nproc: int = 0  # 0: one rank per GPU of the snapshot
    workload_timeout_s: float = 600.0
    workload_visible_var: str = "HIP_VISIBLE_DEVICES"
    workload_util_interval_s: float = 2.0  # amd-smi monitor -u during phase 6's run (validate.phases.workload_util)
    workload_image: str = ""  # the phase 6-7 Jobs' image on Kubernetes (empty: fleet.workload_jobs' default)
    ignored_keys: tuple[str, ...] = ()

    @property
    def nic_pcie_speed_gts(self) -> float | None:
        """The GT/s of the expected NIC PCIe generation."""
        return _PCIE_GEN_GTS[self.nic_pcie_gen] if self.nic_pcie_gen is not None else None


def default_config() -> CvfConfig:
    """The shipped CVF defaults (with the default phase-1 stages)."""
    return parse_cvf_config({}, source="(defaults)")


def parse_cvf_config(mapping: Mapping[str, Any], *, source: str) -> CvfConfig:
    """Typed config from ConfigMap `data` (or a plain mapping); ConfigError names the key and `source`."""
    values: dict[str, Any] = {}
    ignored: list[str] = []
    for key, raw in mapping.items():
        if not isinstance(key, str):
            raise ConfigError(f"{source}: key {key!r} is not a string")
        if key in _READERS or key in SKIP_FLAGS or _phase_timeout(key) is not None or _LABEL_KEY_RE.fullmatch(key):
            values[key] = raw
        elif key in KNOWN_CVF_KEYS or key.endswith(_PLUMBING_SUFFIXES):
            ignored.append(key)
        elif _CHECKED_PREFIX.match(key):
            raise ConfigError(f"{source}: {key}: unknown key (not a CVF threshold, skip flag or UPGRADE_GATE_* key)")
        else:
            ignored.append(key)
    fields: dict[str, Any] = {"source": source, "ignored_keys": tuple(sorted(ignored))}
    for key, raw in values.items():
        reader = _READERS.get(key)
        if reader is not None:
            fields.update(reader(key, raw, source))
    skip_flags: dict[int, str] = {}
    for key, skipped in SKIP_FLAGS.items():
        if key in values and cv.boolean(key, values[key], source):
            skip_flags.setdefault(skipped, key)
    fields["skip"] = frozenset(skip_flags)
    if "TESTS_JSON" in values and not fields["rccl_thresholds"] and 5 not in skip_flags:
        raise ConfigError(
            f"{source}: TESTS_JSON.tests: no tests, so phase 5 would have no bandwidth threshold "
            "(set SKIP_RCCL_TEST to skip phase 5)"
        )
    fields["skip_flags"] = skip_flags
    fields["phase_timeouts_s"] = {
        number: cv.number(key, values[key], source, positive=True)
        for key in values
        if (number := _phase_timeout(key)) is not None
    }
    labels = dict(cvf.PHASE_LABELS)
    for number in labels:
        key = f"PHASE{number}_LABEL_KEY"
        if key in values:
            labels[number] = cv.label_key(key, values[key], source)
    fields["label_keys"] = labels
    fields.setdefault("stages", _stages("GPU_VALIDATION_STAGES_JSON", DEFAULT_STAGES_JSON, "(defaults)")["stages"])
    config = CvfConfig(**fields)
    if config.phase2_start_bytes > config.phase2_end_bytes:
        raise ConfigError(
            f"{source}: PHASE2_START_MSG_SIZE: {config.phase2_start_msg_size} is larger than "
            f"PHASE2_END_MSG_SIZE {config.phase2_end_msg_size}"
        )
    return config


def load_cvf_config(path: Path) -> CvfConfig:
    """Read a ConfigMap manifest or a plain KEY: value YAML file, typed and checked."""
    return parse_cvf_config(read_cvf_values(path), source=str(path))


def read_cvf_values(path: Path) -> dict[str, Any]:
    """The KEY: value mapping of a CVF config file (ConfigMap manifest or plain mapping), values unchecked."""
    return cvf_values(docio.read_yaml(path), source=str(path))


def cvf_values(doc: Any, *, source: str) -> dict[str, Any]:
    """The `data` of a ConfigMap manifest, or a plain KEY: value mapping (see the module docstring)."""
    if doc is None:  # empty, `~`, `null`, only comments: not "CVF's defaults" (a truncated file looked like one)
        raise ConfigError(f"{source}: the document is empty (expected a ConfigMap or a KEY: value mapping)")
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: expected a ConfigMap or a KEY: value mapping, got {type(doc).__name__}")
    if "kind" in doc or "apiVersion" in doc:
        if doc.get("kind") != "ConfigMap":
            raise ConfigError(f"{source}: kind: expected ConfigMap, got {doc.get('kind')!r}")
        data = doc.get("data")
        if data is None:
            raise ConfigError(f"{source}: data: the ConfigMap has no data")
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: data: expected a KEY: value mapping")
        return data
    return doc


# --------------------------------------------------------------------------- readers

Reader = Any  # Callable[[str, object, str], dict[str, Any]]


def _phase_timeout(key: str) -> int | None:
    m = re.fullmatch(r"UPGRADE_GATE_PHASE([0-7])_TIMEOUT_S", key)
    return int(m.group(1)) if m else None


def _one(name: str, read: Any, **kwargs: Any) -> Reader:
    def reader(key: str, raw: object, source: str) -> dict[str, Any]:
        return {name: read(key, raw, source, **kwargs)}

    return reader


def _size(prefix: str) -> Reader:
    def reader(key: str, raw: object, source: str) -> dict[str, Any]:
        value, count = cv.size(key, raw, source)
        return {f"{prefix}_msg_size": value, f"{prefix}_bytes": count}

    return reader


def _stages(key: str, raw: object, source: str) -> dict[str, Any]:
    data = cv.json_value(key, raw, source)
    if not isinstance(data, list):
        raise cv.bad(key, source, "...", "expected a JSON list of stages")
    out: list[Stage] = []
    seen: dict[str, int] = {}
    for i, item in enumerate(data):
        where = f"{key}[{i}]"
        if not isinstance(item, dict):
            raise cv.bad(where, source, item, "expected a stage object")
        _closed(where, item, _STAGE_KEYS, source)
        missing = {"Name", "Framework", "Recipe", "TimeoutSeconds"} - item.keys()
        if missing:
            raise ConfigError(f"{source}: {where}: missing {', '.join(sorted(missing))}")
        name = cv.text(f"{where}.Name", item["Name"], source)
        if not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name):
            raise cv.bad(f"{where}.Name", source, name, "expected lower-case letters, digits and '-'")
        if name in seen:  # CVF names its Jobs and annotations after the stage
            raise ConfigError(f"{source}: {where}.Name: {name!r} is listed twice (also [{seen[name]}])")
        seen[name] = i
        if "Image" in item:
            cv.text(f"{where}.Image", item["Image"], source)
        framework = cv.text(f"{where}.Framework", item["Framework"], source).upper()
        if framework not in ("RVS", "AGFHC"):
            raise cv.bad(f"{where}.Framework", source, item["Framework"], "expected RVS or AGFHC")
        recipe = cv.text(f"{where}.Recipe", item["Recipe"], source)
        if not recipe or recipe.startswith("-"):
            raise cv.bad(f"{where}.Recipe", source, recipe, "expected a recipe name")
        out.append(
            Stage(
                name=name,
                framework=framework,
                recipe=recipe,
                timeout_s=cv.number(f"{where}.TimeoutSeconds", item["TimeoutSeconds"], source, positive=True),
                iterations=cv.integer(f"{where}.Iterations", item.get("Iterations", 1), source, minimum=1),
                arguments=cv.text(f"{where}.Arguments", item.get("Arguments", ""), source),
                skip=cv.boolean(f"{where}.Skip", item.get("Skip", False), source),
            )
        )
    return {"stages": tuple(out)}


def _tests(key: str, raw: object, source: str) -> dict[str, Any]:
    data = cv.json_value(key, raw, source)
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, list):
        raise cv.bad(key, source, "...", 'expected {"tests": [{"name": ..., "threshold": ...}]}')
    _closed(key, data, ("tests",), source)
    out: dict[str, float] = {}
    seen: dict[str, int] = {}
    for i, item in enumerate(tests):
        where = f"{key}.tests[{i}]"
        if not isinstance(item, dict) or "name" not in item or "threshold" not in item:
            raise cv.bad(where, source, item, "expected an object with name and threshold")
        _closed(where, item, _TEST_KEYS, source)
        name = item["name"]
        if not isinstance(name, str) or name not in RCCL_TESTS:
            known = ", ".join(sorted(RCCL_TESTS))
            raise ConfigError(f"{source}: {where}.name: {name!r} is not an rccl-tests program ({known})")
        if name in seen:
            raise ConfigError(f"{source}: {where}.name: {name!r} is listed twice (also tests[{seen[name]}])")
        seen[name] = i
        out[name] = cv.number(f"{where}.threshold", item["threshold"], source)
    return {"rccl_thresholds": out}


def _closed(where: str, item: Mapping[str, object], known: tuple[str, ...], source: str) -> None:
    """Refuse a key of a CVF JSON object that CVF does not define (a typo would be dropped silently)."""
    for name in item:
        if name not in known:
            raise ConfigError(f"{source}: {where}.{name}: unknown key (expected {', '.join(known)})")


def _pcie_gen(key: str, raw: object, source: str) -> dict[str, Any]:
    gen = cv.integer(key, raw, source, minimum=1)
    if gen not in _PCIE_GEN_GTS:
        raise cv.bad(key, source, raw, "expected a PCIe generation 1-6")
    return {"nic_pcie_gen": gen}


def _pcie_width(key: str, raw: object, source: str) -> dict[str, Any]:
    width = cv.integer(key, raw, source, minimum=1)
    if width not in (1, 2, 4, 8, 12, 16, 32):
        raise cv.bad(key, source, raw, "expected a PCIe link width (1, 2, 4, 8, 12, 16 or 32)")
    return {"nic_pcie_width": width}


def _visible_var(key: str, raw: object, source: str) -> dict[str, Any]:
    value = cv.text(key, raw, source)
    if value not in ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        raise cv.bad(key, source, raw, "expected HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES")
    return {"workload_visible_var": value}


def _nonempty(name: str) -> Reader:
    def reader(key: str, raw: object, source: str) -> dict[str, Any]:
        value = cv.text(key, raw, source)
        if not value:
            raise cv.bad(key, source, raw, "expected a non-empty value")
        return {name: value}

    return reader


_READERS: dict[str, Reader] = {
    "PHASE2_BW_THRESHOLD": _one("phase2_bw_threshold", cv.number),
    "PHASE2_START_MSG_SIZE": _size("phase2_start"),
    "PHASE2_END_MSG_SIZE": _size("phase2_end"),
    "PHASE2_STEP_FACTOR": _one("phase2_step_factor", cv.integer, minimum=2),
    "PHASE2_ITER_COUNT": _one("phase2_iter_count", cv.integer, minimum=1),
    "PHASE2_WARMUP_ITER_COUNT": _one("phase2_warmup_iter_count", cv.integer, minimum=0),
    "PHASE2_JOB_WAIT_TIME": _one("phase2_job_wait_s", cv.number, positive=True),
    "PHASE3_EXPECTED_NIC_COUNT": _one("phase3_expected_nic_count", cv.integer, minimum=0),
    "PHASE3_AMD_NIC_PCI_IDS": _one("phase3_amd_nic_pci_ids", cv.pci_ids),
    "PHASE3_MIN_GID_COUNT": _one("phase3_min_gid_count", cv.integer, minimum=0),
    "PHASE3_JOB_WAIT_TIME": _one("phase3_job_wait_s", cv.number, positive=True),
    "PHASE3_DRIVER_FW_CHECK_ENABLED": _one("phase3_fw_check_enabled", cv.boolean),
    "PHASE3_DRIVER_FW_STRICT": _one("phase3_fw_strict", cv.boolean),
    "ROCE_WORKLOAD_IMAGE": _one("roce_workload_image", cv.text),
    "PHASE4_RAIL_COUNT": _one("phase4_rail_count", cv.integer, minimum=1),
    "PHASE4_BW_THRESHOLD": _one("phase4_bw_threshold", cv.number),
    "PHASE4_PAIR_WAIT_TIME": _one("phase4_pair_wait_s", cv.number, positive=True),
    "PHASE4_IB_DEV_PREFIX": _nonempty("phase4_ib_dev_prefix"),
    "PHASE5_MIN_WORKERS": _one("phase5_min_workers", cv.integer, minimum=1),
    "MPIJOB_WAIT_TIME": _one("mpijob_wait_s", cv.number, positive=True),
    "SLOTS_PER_WORKER": _one("slots_per_worker", cv.integer, minimum=1),
    "WORKER_REPLICAS": _one("worker_replicas", cv.integer, minimum=1),
    "NODE_SELECTOR_LABELS": _one("node_selector_labels", cv.selector),
    "TESTS_JSON": _tests,
    "GPU_VALIDATION_STAGES_JSON": _stages,
    "PHASE_FAILURE_REASON_ANNOTATION_SUFFIX": _nonempty("failure_reason_suffix"),
    "UPGRADE_GATE_NIC_FIRMWARE": _nonempty("nic_firmware"),
    "UPGRADE_GATE_NIC_PCIE_GEN": _pcie_gen,
    "UPGRADE_GATE_NIC_PCIE_WIDTH": _pcie_width,
    "UPGRADE_GATE_NIC_VF_COUNT": _one("nic_vf_count", cv.integer, minimum=0),
    "UPGRADE_GATE_SAMPLES": _one("samples", cv.integer, minimum=1, maximum=1024),
    "UPGRADE_GATE_RVS_CONF_DIR": _nonempty("rvs_conf_dir"),
    "UPGRADE_GATE_PHASE4_SERVER_START_S": _one("phase4_server_start_s", cv.number),
    "UPGRADE_GATE_WORKLOAD_COMMAND": _nonempty("workload_command"),
    "UPGRADE_GATE_WORKLOAD_STEPS": _one("workload_steps", cv.integer, minimum=2, maximum=1024),
    "UPGRADE_GATE_WORKLOAD_WARMUP": _one("workload_warmup", cv.integer, minimum=0),
    "UPGRADE_GATE_WORKLOAD_BATCH": _one("workload_batch", cv.integer, minimum=1),
    "UPGRADE_GATE_WORKLOAD_NPROC": _one("workload_nproc", cv.integer, minimum=0),
    "UPGRADE_GATE_WORKLOAD_TIMEOUT_S": _one("workload_timeout_s", cv.number, positive=True),
    "UPGRADE_GATE_WORKLOAD_UTIL_INTERVAL_S": _one("workload_util_interval_s", cv.number, positive=True),
    "UPGRADE_GATE_WORKLOAD_VISIBLE_VAR": _visible_var,
    "UPGRADE_GATE_WORKLOAD_IMAGE": _nonempty("workload_image"),
}
