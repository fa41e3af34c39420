"""Issue 26, "configuration is strict": a key named twice is exit 3 with its key path and both lines.

YAML (both loaders: libyaml's and the pure-Python one), `docio.loads_json` and the msgspec decode of
candidates (`codec.decode_json`) all kept the later value without a word: a policy rule's
`severity: block` then `severity: warn` let a BIOS change pass, a CVF ConfigMap's second
`PHASE2_BW_THRESHOLD` set the floor to zero, a plan with two `id:` keys was accepted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.judge_scenarios import mi300x_snapshot, upgraded
from upgrade_gate import codec, docio, dupkeys
from upgrade_gate.cli.main import run
from upgrade_gate.collect.bundle import load_bundle
from upgrade_gate.dupkeys import json_duplicate
from upgrade_gate.errors import BundleError, ConfigError, InputError, SchemaError
from upgrade_gate.judge.checklist import load_checklist
from upgrade_gate.judge.plan import load_plan
from upgrade_gate.judge.policy import load_policy
from upgrade_gate.model import Snapshot, replace
from upgrade_gate.snapshot.io import dumps_snapshot, load_snapshot, load_snapshot_fast, write_snapshot
from upgrade_gate.store.gitstore import BaselineStore
from upgrade_gate.validate.config import load_cvf_config

TWICE = "name each key once (the later value would silently win)"
FAST = [pytest.param(True, id="libyaml"), pytest.param(False, id="pure-python")]

POLICY = """\
rules:
  - id: host.bios
    severity: block
    severity: warn
"""


@pytest.mark.parametrize("fast", FAST)
@pytest.mark.parametrize(
    ("text", "where"),
    [
        (POLICY, "$.rules[0].severity at lines 3 and 4"),
        ("id: a\ndescription: x\nid: b\n", "$.id at lines 1 and 3"),
        ('{"id": "a",\n "id": "b"}', "$.id at lines 1 and 2"),
        ("a:\n  b: {c: 1, d: 2, c: 3}\n", "$.a.b.c at lines 2 and 2"),
        ("- x: 1\n- x: 1\n  y: 2\n  x: 3\n", "$[1].x at lines 2 and 4"),
        ("1: a\n1.0: b\n", "$.1.0 at lines 1 and 2"),  # equal keys however written
    ],
)
def test_yaml_duplicate_key_is_refused_by_both_loaders_with_path_and_lines(fast: bool, text: str, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        docio._load_yaml(text, source="doc.yaml", fast=fast)
    assert str(err.value) == f"doc.yaml: duplicate key {where}; {TWICE}"


@pytest.mark.parametrize("fast", FAST)
@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("rule:\n  <<: {severity: warn}\n  severity: block\n", "line 2 ($.rule)"),
        ("rule:\n  !!merge x: {severity: warn}\n", "line 2 ($.rule)"),
        ("- a: 1\n- <<: [{a: 2}]\n", "line 2 ($[1])"),
    ],
)
def test_yaml_merge_keys_are_refused(fast: bool, text: str, where: str) -> None:
    """A merge key copies a mapping in, and the explicit keys beside it silently win: refused like aliases."""
    with pytest.raises(ConfigError) as err:
        docio._load_yaml(text, source="doc.yaml", fast=fast)
    assert str(err.value) == f"doc.yaml: merge key (<<) at {where}; write the keys out in full"


@pytest.mark.parametrize("fast", FAST)
def test_yaml_quoted_double_less_than_is_a_plain_string(fast: bool) -> None:
    assert docio._load_yaml("'<<': 1\nop: '<<'\n", source="doc.yaml", fast=fast) == {"<<": 1, "op": "<<"}


def test_yaml_shipped_documents_still_load() -> None:
    load_policy()
    for name in ("pre-change", "canary", "observe"):
        load_checklist(name)


def test_policy_rule_with_severity_twice_is_exit_3_not_a_pass(tmp_path: Path) -> None:
    """The issue's case: `severity: block` then `severity: warn` on host.bios let a BIOS change pass."""
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    with pytest.raises(ConfigError, match=r"policy\.yaml: duplicate key \$\.rules\[0\]\.severity at lines 3 and 4"):
        load_policy(policy)


def test_gate_with_a_duplicate_key_policy_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with BaselineStore(tmp_path / "store") as st:
        st.save([mi300x_snapshot()], message="a baseline")
    candidate = tmp_path / "cand.json"
    write_snapshot(replace(upgraded(), host=replace(upgraded().host, bios_version="2.2")), candidate)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    args = ["gate", "--store", str(tmp_path / "store"), "--candidate", str(candidate), "--policy", str(policy)]
    assert run(args) == 3
    assert capsys.readouterr().err == (
        f"upgrade-gate: error: {policy}: duplicate key $.rules[0].severity at lines 3 and 4; {TWICE}\n"
    )


def test_cvf_configmap_threshold_twice_is_refused(tmp_path: Path) -> None:
    """The second PHASE2_BW_THRESHOLD silently set the mesh floor to zero."""
    path = tmp_path / "cvf.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-validation-config\ndata:\n"
        '  PHASE2_BW_THRESHOLD: "100"\n  PHASE3_MIN_GID_COUNT: "1"\n  PHASE2_BW_THRESHOLD: "0"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"duplicate key \$\.data\.PHASE2_BW_THRESHOLD at lines 6 and 8"):
        load_cvf_config(path)


def test_plan_with_two_ids_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("id: rocm-6.2.0\ndescription: the upgrade\nid: rocm-6.3.0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"plan\.yaml: duplicate key \$\.id at lines 1 and 3"):
        load_plan(path)


def test_checklist_file_with_a_key_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("id: mine\ntitle: a\ntitle: b\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"duplicate key \$\.title at lines 2 and 3"):
        load_checklist(str(path))


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"a": 1,\n "b": {"x": [1, {"k": 1,\n "k": 2}]}}', "$.b.x[1].k at lines 2 and 3"),
        ('{"a": 1, "\\u0061": 2}', "$.a at lines 1 and 1"),  # the same key, spelled with an escape
        ('[{}, {"a": {"a": 1}, "b": 1,\n\n "b": [3]}]', "$[1].b at lines 1 and 3"),
        ('{"s": "x\\": 1, \\"s", "s": 2}', "$.s at lines 1 and 1"),  # a quote and colon inside a string
    ],
)
def test_loads_json_refuses_a_duplicate_with_path_and_lines(text: str, where: str) -> None:
    with pytest.raises(InputError) as err:
        docio.loads_json(text, source="doc.json")
    assert str(err.value) == f"doc.json: duplicate key {where}; {TWICE}"


def test_loads_json_keeps_equal_keys_in_different_objects() -> None:
    assert docio.loads_json('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}') == {"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}
    assert json_duplicate('{"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}]}') is None


def _with_duplicate(text: str, key: str, value: str) -> str:
    """`text` with `"key": value, ` put before the first naming of `key` (same object, so named twice)."""
    at = text.index(f'"{key}":')
    return text[:at] + f'"{key}": {value}, ' + text[at:]


def test_candidate_snapshot_with_a_key_twice_is_refused_by_both_readers(tmp_path: Path) -> None:
    """The gate's strict msgspec decode kept the later value; so did the schema-checked reader."""
    text = dumps_snapshot(upgraded())
    path = tmp_path / "cand.json"
    path.write_text(_with_duplicate(text, "taken_at", '"2099-01-01T00:00:00Z"'), encoding="utf-8")
    line = text[: text.index('"taken_at":')].count("\n") + 1
    expected = f"{path}: duplicate key $.taken_at at lines {line} and {line}; {TWICE}"
    with pytest.raises(InputError) as fast:
        load_snapshot_fast(path)
    assert str(fast.value) == expected
    with pytest.raises(InputError) as slow:
        load_snapshot(path)
    assert str(slow.value) == expected


def test_decode_json_duplicate_count_is_not_fooled_by_colons_in_strings() -> None:
    """The fast count compares `:` before and after a plain decode; an escaped colon (`\\u003a`) in a
    string would offset a dropped member, so such a document takes the exact locator."""
    text = dumps_snapshot(upgraded())
    assert codec.decode_json(Snapshot, text) == upgraded()
    escaped = text.replace('"tool_version": "', '"tool_version": "\\u003a', 1)
    assert codec.decode_json(Snapshot, escaped).tool_version.startswith(":")
    hidden = _with_duplicate(escaped, "taken_at", '"2099-01-01T00:00:00Z"')
    with pytest.raises(InputError, match=r"duplicate key \$\.taken_at"):
        codec.decode_json(Snapshot, hidden, source="c.json")
    dropped = _with_duplicate(text, "taken_at", '"a:b:c"')  # the dropped value had colons of its own
    with pytest.raises(InputError, match=r"duplicate key \$\.taken_at"):
        codec.decode_json(Snapshot, dropped, source="c.json")


def test_decode_json_counts_a_document_without_every_field_the_slower_way() -> None:
    """A document an older writer made (a field left out) misses the complete mirror's fast count and
    is counted from its plain decode: a key named twice is refused all the same, a clean one decoded."""
    doc = json.loads(dumps_snapshot(upgraded()))
    del doc["evidence_issues"]  # optional: the model's default
    text = json.dumps(doc, indent=2)
    assert codec.decode_json(Snapshot, text) == upgraded()
    with pytest.raises(InputError, match=r"c\.json: duplicate key \$\.taken_at at lines"):
        codec.decode_json(Snapshot, _with_duplicate(text, "taken_at", '"2099-01-01T00:00:00Z"'), source="c.json")


def test_decode_json_reports_a_wrong_type_as_before_not_as_a_missing_field() -> None:
    doc = json.loads(dumps_snapshot(upgraded()))
    doc["schema_version"] = 99
    with pytest.raises(SchemaError, match=r"c\.json: Expected .* - at `\$\.schema_version`"):
        codec.decode_json(Snapshot, json.dumps(doc), source="c.json")


def test_diff_cli_with_a_duplicate_key_candidate_exits_3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = tmp_path / "base.json"
    write_snapshot(mi300x_snapshot(), base)
    cand = tmp_path / "cand.json"
    cand.write_text(_with_duplicate(dumps_snapshot(upgraded()), "node", '{"name": "x"}'), encoding="utf-8")
    assert run(["diff", str(base), str(cand)]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"upgrade-gate: error: {cand}: duplicate key $.node at lines ") and err.count("\n") == 1


def test_bundle_manifest_with_a_key_twice_is_a_bundle_error(tmp_path: Path) -> None:
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "manifest.json").write_text('{"node": "gpu-1",\n "node": "gpu-2"}', encoding="utf-8")
    with pytest.raises(BundleError, match=r"manifest\.json: duplicate key \$\.node at lines 1 and 2"):
        load_bundle(bundle)


def test_json_documents_the_tool_writes_have_no_duplicates_to_find() -> None:
    doc = json.loads(dumps_snapshot(upgraded()))
    assert json_duplicate(json.dumps(doc, indent=2)) is None


def test_snapshots_the_tool_writes_take_the_fast_count() -> None:
    """`dumps_snapshot` writes every field, so a candidate decodes through the complete mirror (the
    key count is then the re-encoding alone, docs/limits.md); a writer that left fields out would
    silently move every candidate to the slower count."""
    for snap in (upgraded(), mi300x_snapshot()):
        codec._mirror_decoder(Snapshot, complete=True).decode(dumps_snapshot(snap))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=3 * dupkeys._VECTOR_FROM), st.integers(min_value=0, max_value=2 * dupkeys._VECTOR_FROM))
def test_colons_counts_what_bytes_count_counts_on_either_side_of_the_vector_length(data: bytes, pad: int) -> None:
    import numpy  # noqa: F401 - loaded, as in a gate worker: the vectorised count is the one tested

    for text in (data, data + b":" * pad, b"x" * pad + data, b":" * (dupkeys._VECTOR_FROM + pad % 3 - 1)):
        assert dupkeys.colons(text) == text.count(b":")
