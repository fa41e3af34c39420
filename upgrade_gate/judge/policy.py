"""The policy: which rules run, how hard they bite, their parameters and the gate's thresholds.

Rules are data (`schemas/policy.schema.json`): a list of entries `{id, severity, enabled, params,
applies_to}` naming rules from the closed set registered in `judge.rules` (no code, no eval). Example:

    name: prod-mi300x
    thresholds: {mesh_avg_busbw_min_gbs: 250}
    phases: {not_applicable: {mi300x-gpu-only: [3, 4, 5]}}   # "*": every class, also nodes without one
    nics: {expected_count: {mi210-4gpu: 0, mi300x-8gpu: 8}}  # 0: a class without RDMA NICs
    rules:
      - {id: bandwidth.regression, params: {tolerance: 0.05}}
      - {id: pcie.downgrade, severity: warn, applies_to: [lab-nodes]}

Design decisions:
- A policy file that holds no document (empty, `~`, `null`, only comments) is a ConfigError, not the
  default policy under the file's name (a truncated copy must not pass for a site policy).
- A policy file is laid over the shipped default (`data/default-policy.yaml`) unless it says
  `inherit_default: false`: an entry replaces the default entry with the same id and `applies_to`,
  taking unspecified fields (and parameters, one by one) from the rule's general entry. So forgetting
  a rule in a site policy never silently switches it off; switching it off takes `enabled: false`.
  A policy with `inherit_default: false` must therefore list every rule (ConfigError naming the ones
  it leaves out), and `gate` says on stderr which rules a policy switches off.
- For a node of class C a rule uses the entry whose `applies_to` names C (the last such), else the
  entry with an empty `applies_to`, else it does not run for that node.
- Thresholds, lowest precedence first: CVF's defaults, then the CVF ConfigMap (`cvf_config`:
  `PHASE2_BW_THRESHOLD` GB/s, `PHASE4_BW_THRESHOLD` Gb/s, `PHASE3_MIN_GID_COUNT`,
  `PHASE3_EXPECTED_NIC_COUNT`, `PHASE3_AMD_NIC_PCI_IDS`, `PHASE4_RAIL_COUNT`, `PHASE5_MIN_WORKERS`,
  `UPGRADE_GATE_NIC_FIRMWARE`, `UPGRADE_GATE_NIC_VF_COUNT`), then the policy file's `thresholds`.
  The ConfigMap is read by `validate.config.parse_cvf_config`, the one reader of CVF keys, so an
  unknown `PHASE*`/`SKIP_*` key or a malformed value is a ConfigError naming the key here too.
  Every threshold remembers where it came from, and findings quote it.
- `nics.expected_count` declares per node class (or `*`) how many RDMA NICs a node has. 0 declares a
  NIC-less class: it passes without NICs (its NIC probes failing on a host with no RDMA device are
  reported, not blocking; CVF phases 3 and 4 do not apply) and blocks when NICs show up. A class that
  declares N > 0 blocks when it shows any other count, none included. An undeclared class keeps CVF's
  behaviour: PHASE3_EXPECTED_NIC_COUNT applies to nodes that show NICs.
- Parameters are checked against each rule's declared `ParamSpec`s on load: an unknown parameter or a
  wrong type is a ConfigError naming the file and `$.rules[i].params.<name>`.
- `kernel_events.patterns` is the site's fatal-error map over the shipped kernel-log patterns (new
  patterns, per-family re-grades, baseline-rate tolerance): see `judge.kernel_events`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from upgrade_gate import docio, schemas
from upgrade_gate.errors import ConfigError, SchemaError
from upgrade_gate.judge.kernel_events import KernelEventPolicy, build_kernel_events, shipped_kernel_events
from upgrade_gate.judge.policy_loosened import loosened, policy_loosened, refuse_degenerate
from upgrade_gate.judge.rules.base import OPERATORS, STATISTICS, ParamSpec
from upgrade_gate.model import RuleId, Severity

if TYPE_CHECKING:
    from upgrade_gate.validate.config import CvfConfig

DEFAULT_POLICY_SOURCE = "default-policy.yaml (shipped)"


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricCheck:
    """One generic metric check of `metric.threshold`: statistic(samples) <op> value."""

    metric: str
    op: str
    value: float
    statistic: str = "median"


_SEVERITY_WORDS = {"block": Severity.BLOCK, "warn": Severity.WARN, "info": Severity.INFO}


@dataclass(frozen=True, slots=True, kw_only=True)
class RuleEntry:
    """One policy entry for a registered rule, parameters complete and typed."""

    id: RuleId
    severity: Severity
    enabled: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    applies_to: tuple[str, ...] = ()

    def number(self, name: str) -> float:
        """A `number` parameter."""
        return float(self.params[name])

    def integer(self, name: str) -> int:
        """An `integer` parameter."""
        return int(self.params[name])

    def flag(self, name: str) -> bool:
        """A `boolean` parameter."""
        return bool(self.params[name])

    def string(self, name: str) -> str:
        """A `string` parameter."""
        return str(self.params[name])

    def severity_param(self, name: str) -> Severity:
        """A `string` parameter that names a severity (block, warn, info); anything else blocks (fail closed)."""
        return _SEVERITY_WORDS.get(self.string(name), Severity.BLOCK)

    def strings(self, name: str) -> tuple[str, ...]:
        """A `strings` parameter."""
        return tuple(self.params[name])

    def integers(self, name: str) -> tuple[int, ...]:
        """An `integers` parameter."""
        return tuple(self.params[name])

    def number_map(self, name: str) -> dict[str, float]:
        """A `number_map` parameter (glob -> number)."""
        return dict(self.params[name])

    def checks(self, name: str) -> tuple[MetricCheck, ...]:
        """A `checks` parameter."""
        return tuple(self.params[name])


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Absolute limits (CVF's, by default) with where each one came from."""

    mesh_avg_busbw_min_gbs: float = 100.0
    rail_bw_min_gbits: float = 380.0
    min_gid_count: int = 1
    expected_nic_count: int = 8
    rail_count: int = 8
    nic_pci_ids: tuple[str, ...] = ("1dd8:1002",)
    min_workers: int = 2
    nic_firmware: str | None = None
    nic_vf_count: int | None = None
    sources: dict[str, str] = field(default_factory=dict)  # field -> "CVF default", "cvf.yaml: KEY", ...
    cvf_skip_flags: dict[int, str] = field(default_factory=dict)  # phase -> SKIP_* flag that switched it off

    def source(self, name: str) -> str:
        """Where threshold `name` came from."""
        return self.sources.get(name, "CVF default")


_Found = dict[tuple[str, str | None], "RuleEntry | None"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """A complete, validated policy."""

    name: str
    rules: tuple[RuleEntry, ...]
    thresholds: Thresholds = Thresholds()
    phases_not_applicable: dict[str, tuple[int, ...]] = field(default_factory=dict)
    nic_counts: dict[str, int] = field(default_factory=dict)  # node class (or "*") -> RDMA NICs expected
    ignore_paths: tuple[str, ...] = ()
    source: str = DEFAULT_POLICY_SOURCE
    kernel_events: KernelEventPolicy = field(default_factory=shipped_kernel_events)  # the fatal-error map
    # rule_for's answers, a pure function of `rules` (~50 asks a node, each a scan of every entry)
    _found: _Found = field(default_factory=dict, init=False, repr=False, compare=False)

    def expected_nics(self, node_class: str | None) -> int | None:
        """The RDMA NIC count the policy declares for `node_class` (None: not declared)."""
        if node_class is not None and node_class in self.nic_counts:
            return self.nic_counts[node_class]
        return self.nic_counts.get("*")

    def nic_less(self, node_class: str | None) -> bool:
        """True when the policy declares the class without RDMA NICs (`nics.expected_count: 0`)."""
        return self.expected_nics(node_class) == 0

    def rule_for(self, rule_id: str, node_class: str | None) -> RuleEntry | None:
        """The entry that governs `rule_id` for a node of `node_class` (None: the rule does not run)."""
        ask = (rule_id, node_class)
        if ask not in self._found:
            self._found[ask] = self._rule_for(rule_id, node_class)
        return self._found[ask]

    def _rule_for(self, rule_id: str, node_class: str | None) -> RuleEntry | None:
        general: RuleEntry | None = None
        specific: RuleEntry | None = None
        for entry in self.rules:
            if entry.id != rule_id:
                continue
            if not entry.applies_to:
                general = entry
            elif node_class is not None and node_class in entry.applies_to:
                specific = entry
        return specific or general

    def switched_off(self) -> str | None:
        """One line naming the rules this policy switches off (`enabled: false`) or lowers so that they cannot
        block where the shipped default blocks (`severity: warn|info`), for stderr; None: neither. Either is the
        operator's decision, but a PASS that judged without them should say so (`severity: info` was the
        quiet way: break test 2026-12-07)."""
        off = [e.id + (f" for {', '.join(e.applies_to)}" if e.applies_to else "") for e in self.rules if not e.enabled]
        low = [
            e.id + (f" for {', '.join(e.applies_to)}" if e.applies_to else "") + f" ({e.severity.value})"
            for e in self.rules
            if e.enabled and _lowered(e)
        ]
        loose = policy_loosened(self, _shipped()) if self.source != DEFAULT_POLICY_SOURCE else ()
        if not off and not low and not loose:
            return None
        said = []
        if off:
            said.append(
                f"switches off {len(off)} rule(s): {', '.join(off)}; what they judge is not judged in this verdict"
            )
        if low:
            said.append(f"lowers {len(low)} rule(s) that block by default, so that they cannot block: {', '.join(low)}")
        if loose:
            said.append(f"judges {len(loose)} rule(s) more leniently than the shipped default: {'; '.join(loose)}")
        return f"policy {self.name} ({self.source}) " + "; and ".join(said)

    def loosened(self, rule_id: str, node_class: str | None) -> tuple[str, ...]:
        """The parameters of the entry governing `rule_id` for `node_class` that judge more leniently than the
        shipped default's (`judge.policy_loosened`); empty for the shipped policy itself."""
        entry = self.rule_for(rule_id, node_class)
        if entry is None or not entry.enabled or self.source == DEFAULT_POLICY_SOURCE:
            return ()
        return loosened(entry, _shipped().rule_for(rule_id, None))

    def lowered(self, rule_id: str, node_class: str | None) -> bool:
        """True when the entry governing `rule_id` for `node_class` cannot block where the shipped default's does."""
        entry = self.rule_for(rule_id, node_class)
        return entry is not None and entry.enabled and _lowered(entry)

    def phase_applies(self, phase: int, node_class: str | None) -> bool:
        """False when the policy declares `phase` not applicable to `node_class` (or to every class, `*`)."""
        if phase in self.phases_not_applicable.get("*", ()):
            return False
        if phase in (3, 4) and self.nic_less(node_class):
            return False  # NIC health and rail bandwidth of a class declared without RDMA NICs
        return node_class is None or phase not in self.phases_not_applicable.get(node_class, ())


_CVF_FIELDS = {
    "PHASE2_BW_THRESHOLD": ("mesh_avg_busbw_min_gbs", "phase2_bw_threshold"),
    "PHASE4_BW_THRESHOLD": ("rail_bw_min_gbits", "phase4_bw_threshold"),
    "PHASE3_MIN_GID_COUNT": ("min_gid_count", "phase3_min_gid_count"),
    "PHASE3_EXPECTED_NIC_COUNT": ("expected_nic_count", "phase3_expected_nic_count"),
    "PHASE3_AMD_NIC_PCI_IDS": ("nic_pci_ids", "phase3_amd_nic_pci_ids"),
    "PHASE4_RAIL_COUNT": ("rail_count", "phase4_rail_count"),
    "PHASE5_MIN_WORKERS": ("min_workers", "phase5_min_workers"),
    "UPGRADE_GATE_NIC_FIRMWARE": ("nic_firmware", "nic_firmware"),
    "UPGRADE_GATE_NIC_VF_COUNT": ("nic_vf_count", "nic_vf_count"),
}


def _lowered(entry: RuleEntry) -> bool:
    """True when `entry` cannot block (warn, info) and the shipped default policy's entry for its rule blocks."""
    return entry.severity is not Severity.BLOCK and _shipped_severity(entry.id) is Severity.BLOCK


@functools.cache
def _shipped() -> Policy:
    """The shipped default policy (what `loosened` compares with)."""
    return load_policy()


@functools.cache
def _shipped_severity(rule_id: str) -> Severity | None:
    """The severity the shipped default policy gives `rule_id` (its general entry)."""
    entry = _shipped().rule_for(rule_id, None)
    return entry.severity if entry is not None else None


def load_policy(
    path: Path | None = None,
    cvf_config: Mapping[str, Any] | CvfConfig | None = None,
    *,
    cvf_source: str = "CVF config",
) -> Policy:
    """The shipped default policy, overlaid with `path` (if any) and thresholds from `cvf_config`."""
    default = _default_document()
    user = docio.read_yaml(path) if path is not None else None
    source = str(path) if path is not None else DEFAULT_POLICY_SOURCE
    if path is not None and user is None:  # empty, `~`, `null`, only comments: not "the default policy"
        raise ConfigError(f"{source}: policy: the document is empty")
    if user is not None:
        _validate(user, source)
    return build_policy(default, user, source=source, cvf_config=cvf_config, cvf_source=cvf_source)


def policy_from_text(text: str, *, source: str) -> Policy:
    """A policy document given as text (validated as a file's would be), laid over the shipped default."""
    user = docio.parse_yaml(text, source=source)
    if user is None:
        raise ConfigError(f"{source}: policy: the document is empty")
    _validate(user, source)
    return build_policy(_default_document(), user, source=source)


def _default_document() -> dict[str, Any]:

    text = (resources.files("upgrade_gate") / "data" / "default-policy.yaml").read_text(encoding="utf-8")
    doc = docio.load_yaml(text, source=DEFAULT_POLICY_SOURCE)
    _validate(doc, DEFAULT_POLICY_SOURCE)
    return cast(dict[str, Any], doc)


def _validate(doc: Any, source: str) -> None:
    if not isinstance(doc, dict):
        raise ConfigError(f"{source}: policy: expected a mapping at the top level")
    try:
        schemas.validate("policy", doc, source=source)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None


def _every_rule_listed(source: str, listed: set[str], registry: Mapping[RuleId, Any]) -> None:
    """A self-contained policy (`inherit_default: false`) names every rule: one left out would run for no
    node, without a word (a break test's `rules: []` passed a reversed GPU order). Switching a rule off
    is `enabled: false`, on purpose."""
    missing = sorted(str(r) for r in registry if str(r) not in listed)
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise ConfigError(
            f"{source}: policy: $.inherit_default: false leaves {len(missing)} rule(s) unlisted ({shown}): a "
            "policy that does not inherit the default lists every rule (`enabled: false` switches one off)"
        )


def build_policy(
    default: Mapping[str, Any],
    user: Mapping[str, Any] | None,
    *,
    source: str,
    cvf_config: Mapping[str, Any] | CvfConfig | None = None,
    cvf_source: str = "CVF config",
) -> Policy:
    """Merge a (schema-valid) user policy document over the default one and type everything."""
    from upgrade_gate.judge.rules import REGISTRY

    inherit = user is None or bool(user.get("inherit_default", True))
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if inherit:
        layers.append((DEFAULT_POLICY_SOURCE, default))
    if user is not None:
        layers.append((source, user))
    merged: dict[tuple[str, tuple[str, ...]], tuple[str, int, dict[str, Any]]] = {}
    for where, doc in layers:
        seen: set[tuple[str, tuple[str, ...]]] = set()
        for i, raw in enumerate(doc.get("rules", ())):
            key = (raw["id"], tuple(sorted(raw.get("applies_to", ()))))
            if key in seen:
                raise ConfigError(f"{where}: policy: $.rules[{i}]: rule {raw['id']} is listed twice for {key[1]}")
            seen.add(key)
            base = merged.get(key) or merged.get((raw["id"], ()))
            combined = dict(base[2]) if base else {}
            params = dict(combined.get("params", {}))
            params.update(raw.get("params", {}))
            combined.update(raw)
            combined["params"] = params
            merged[key] = (where, i, combined)
    if not inherit:
        _every_rule_listed(source, {rule_id for rule_id, _ in merged}, REGISTRY)
    entries: list[RuleEntry] = []
    for (rule_id, applies_to), (where, i, raw) in merged.items():
        rule = REGISTRY[RuleId(rule_id)]
        entry = RuleEntry(
            id=rule.id,
            severity=Severity(raw.get("severity", rule.default_severity.value)),
            enabled=bool(raw.get("enabled", True)),
            params=_params(rule.params, raw.get("params", {}), f"{where}: policy: $.rules[{i}].params"),
            applies_to=applies_to,
        )
        refuse_degenerate(entry, f"{where}: policy: $.rules[{i}].params")
        entries.append(entry)
    not_applicable: dict[str, tuple[int, ...]] = {}
    nic_counts: dict[str, int] = {}
    ignore: list[str] = []
    for _, doc in layers:
        for cls, phases in (doc.get("phases", {}).get("not_applicable", {}) or {}).items():
            not_applicable[cls] = tuple(sorted(set(phases)))
        nic_counts.update((doc.get("nics") or {}).get("expected_count") or {})
        ignore.extend(doc.get("ignore_paths", ()))
    kernel_entries = [
        (f"{where}: policy: $.kernel_events.patterns[{i}]", raw)
        for where, doc in layers
        for i, raw in enumerate((doc.get("kernel_events") or {}).get("patterns", ()))
    ]
    name = str(user.get("name", "custom")) if user is not None else str(default.get("name", "default"))
    return Policy(
        name=name,
        rules=tuple(sorted(entries, key=lambda e: (e.id, e.applies_to))),
        thresholds=_thresholds(layers, cvf_config, cvf_source),
        phases_not_applicable=not_applicable,
        nic_counts=nic_counts,
        ignore_paths=tuple(dict.fromkeys(ignore)),
        source=source,
        kernel_events=build_kernel_events(kernel_entries),
    )


def _thresholds(
    layers: Sequence[tuple[str, Mapping[str, Any]]],
    cvf_config: Mapping[str, Any] | CvfConfig | None,
    cvf_source: str,
) -> Thresholds:
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    skips: dict[int, str] = {}
    if cvf_config is not None:
        from upgrade_gate.validate.config import CvfConfig, parse_cvf_config

        given = None if isinstance(cvf_config, CvfConfig) else set(cvf_config)
        config = cvf_config if isinstance(cvf_config, CvfConfig) else parse_cvf_config(cvf_config, source=cvf_source)
        where = cvf_source if given is not None else config.source
        for key, (name, attr) in _CVF_FIELDS.items():
            if given is not None and key not in given:
                continue
            value = getattr(config, attr)
            values[name] = tuple(value) if isinstance(value, tuple | list) else value
            sources[name] = f"{where}: {key}"
        skips = dict(config.skip_flags)
    for where, doc in layers:
        for name, value in (doc.get("thresholds") or {}).items():
            values[name] = tuple(value) if isinstance(value, list) else value
            sources[name] = f"{where}: thresholds.{name}"
    return Thresholds(**values, sources=sources, cvf_skip_flags=skips)


def _params(declared: Mapping[str, ParamSpec], given: Mapping[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(given) - set(declared))
    if unknown:
        known = ", ".join(sorted(declared)) or "none"
        raise ConfigError(f"{where}.{unknown[0]}: unknown parameter (this rule takes: {known})")
    return {name: _param(ps, given.get(name, ps.default), f"{where}.{name}") for name, ps in declared.items()}


def _param(ps: ParamSpec, value: Any, where: str) -> Any:
    kind = ps.kind
    if kind in ("number", "integer"):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise ConfigError(f"{where}: expected a {kind}, got {value!r}")
        if kind == "integer" and not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        if ps.minimum is not None and value < ps.minimum:
            raise ConfigError(f"{where}: {value!r} is below the minimum {ps.minimum}")
        if ps.maximum is not None and value > ps.maximum:
            raise ConfigError(f"{where}: {value!r} is above the maximum {ps.maximum}")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind == "string":
        if not isinstance(value, str) or not value:
            raise ConfigError(f"{where}: expected a non-empty string, got {value!r}")
        return value
    if kind in ("strings", "integers"):
        item = str if kind == "strings" else int
        if not isinstance(value, list | tuple) or not all(
            isinstance(v, item) and not isinstance(v, bool) for v in value
        ):
            raise ConfigError(f"{where}: expected a list of {item.__name__}s, got {value!r}")
        return tuple(value)
    if kind == "number_map":
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
            for k, v in value.items()
        ):
            raise ConfigError(f"{where}: expected a mapping of glob -> non-negative number, got {value!r}")
        return dict(value)
    if kind == "checks":
        return _checks(value, where)
    raise AssertionError(f"unknown parameter kind {kind!r}")  # pragma: no cover - PARAM_KINDS is closed


def _checks(value: Any, where: str) -> tuple[MetricCheck, ...]:
    if isinstance(value, tuple) and all(isinstance(v, MetricCheck) for v in value):
        return value
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list of {{metric, op, value, statistic}}, got {value!r}")
    out = []
    for i, item in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{at}: expected a mapping, got {item!r}")
        unknown = sorted(set(item) - {"metric", "op", "value", "statistic"})
        if unknown:
            raise ConfigError(f"{at}.{unknown[0]}: unknown field")
        for required in ("metric", "op", "value"):
            if required not in item:
                raise ConfigError(f"{at}.{required}: missing")
        if not isinstance(item["metric"], str) or not item["metric"]:
            raise ConfigError(f"{at}.metric: expected a metric key glob, got {item['metric']!r}")
        if item["op"] not in OPERATORS:
            raise ConfigError(f"{at}.op: {item['op']!r} is not one of {sorted(OPERATORS)}")
        stat = item.get("statistic", "median")
        if stat not in STATISTICS:
            raise ConfigError(f"{at}.statistic: {stat!r} is not one of {sorted(STATISTICS)}")
        number = item["value"]
        if isinstance(number, bool) or not isinstance(number, int | float) or not math.isfinite(number):
            raise ConfigError(f"{at}.value: expected a number, got {number!r}")
        out.append(MetricCheck(metric=item["metric"], op=item["op"], value=float(number), statistic=stat))
    return tuple(out)
