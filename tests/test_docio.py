"""One reader per document kind (issue 17): files are read and parsed once, in `docio`, and the two
CVF config entry points (`validate --config`, `gate --cvf-config`) unwrap a ConfigMap by one rule."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.judge_scenarios import mi300x_snapshot
from upgrade_gate import docio
from upgrade_gate.cli.judge_cmds import read_cvf_config
from upgrade_gate.cli.main import run
from upgrade_gate.errors import BundleError, ConfigError, ExitCode, InputError, NotFoundError, SchemaError
from upgrade_gate.snapshot.io import dumps_snapshot, load_snapshot, load_snapshot_fast
from upgrade_gate.validate.config import load_cvf_config, parse_cvf_config


def test_docio_read_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.yaml"
    path.write_text("id: x\nchange: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"plan\.yaml: not YAML/JSON at line 3"):
        docio.read_yaml(path)
    with pytest.raises(NotFoundError, match="no such file"):
        docio.read_yaml(tmp_path / "absent.yaml")
    path.write_bytes(b"id: \xff\n")
    with pytest.raises(InputError, match="unreadable"):
        docio.read_yaml(path)


def test_docio_parse_json_maps_every_failure_to_the_callers_error() -> None:
    with pytest.raises(BundleError, match=r"m\.json: not JSON: .* at line 2"):
        docio.parse_json('{"a":\n', source="m.json", error=BundleError)
    with pytest.raises(BundleError, match=r"m\.json: not UTF-8"):
        docio.parse_json(b'{"a": "\xff"}', source="m.json", error=BundleError)
    with pytest.raises(BundleError, match="not a finite number"):
        docio.parse_json('{"a": NaN}', source="m.json", error=BundleError)
    assert docio.parse_json(b'{"a": 1}', source="m.json") == {"a": 1}


def test_docio_both_snapshot_readers_agree_on_broken_files(tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    good.write_text(dumps_snapshot(mi300x_snapshot()), encoding="utf-8")
    assert load_snapshot(good) == load_snapshot_fast(good) == mi300x_snapshot()
    for name, data, error in (
        ("absent.json", None, NotFoundError),
        ("syntax.json", b'{"node":\n', InputError),
        ("nan.json", b'{"x": NaN}', InputError),
    ):
        path = tmp_path / name
        if data is not None:
            path.write_bytes(data)
        for reader in (load_snapshot, load_snapshot_fast):
            with pytest.raises(error, match=name):
                reader(path)
    # a field the schema requires although the model has a default (ALWAYS): both readers refuse its absence
    data = json.loads(good.read_text(encoding="utf-8"))
    del data["software"]["kernel"]
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps(data), encoding="utf-8")
    for reader in (load_snapshot, load_snapshot_fast):
        with pytest.raises(SchemaError, match="kernel"):
            reader(missing)


def test_docio_stages_json_refuses_nan() -> None:
    with pytest.raises(ConfigError, match="not a finite number"):
        parse_cvf_config({"GPU_VALIDATION_STAGES_JSON": '[{"name": "x", "threshold": NaN}]'}, source="cvf.yaml")


CVF_DOCUMENTS = {
    "plain": "PHASE2_BW_THRESHOLD: '180'\n",
    "configmap": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  PHASE2_BW_THRESHOLD: '180'\n",
    "secret": "apiVersion: v1\nkind: Secret\ndata:\n  PHASE2_BW_THRESHOLD: '180'\n",
    "kind-only": "kind: Secret\nPHASE2_BW_THRESHOLD: '180'\n",  # validate --config took this for a plain mapping
    "apiversion-no-data": "apiVersion: v1\nmetadata: {name: c}\n",
    "configmap-no-data": "apiVersion: v1\nkind: ConfigMap\n",
    "list": "- a\n",
    "empty": "",
}


@pytest.mark.parametrize("case", sorted(CVF_DOCUMENTS))
def test_docio_validate_config_and_gate_cvf_config_unwrap_alike(case: str, tmp_path: Path) -> None:
    path = tmp_path / f"{case}.yaml"
    path.write_text(CVF_DOCUMENTS[case], encoding="utf-8")
    outcomes = []
    for read in (lambda: load_cvf_config(path), lambda: parse_cvf_config(read_cvf_config(path), source=str(path))):
        try:
            outcomes.append(("ok", read().phase2_bw_threshold))
        except ConfigError as exc:
            outcomes.append(("refused", str(exc)))
    assert outcomes[0] == outcomes[1], outcomes
    expect_ok = case in {"plain", "configmap"}  # an empty file or a ConfigMap without data is no CVF config
    assert (outcomes[0][0] == "ok") is expect_ok, outcomes[0]


def test_docio_gate_refuses_a_manifest_that_is_not_a_configmap(tmp_path: Path, capsys) -> None:
    path = tmp_path / "cvf.yaml"
    path.write_text(CVF_DOCUMENTS["kind-only"], encoding="utf-8")
    assert run(["gate", "--store", str(tmp_path / "store"), "--cvf-config", str(path)]) == ExitCode.BAD_INPUT
    assert "kind: expected ConfigMap, got 'Secret'" in capsys.readouterr().err


YAML_CASES = [
    "a: 1\n---\nb: 2\n",
    "? [a, b]\n: c\n",
    "a: !!python/object:os.system x\n",
    "a: [1, 2\n",
    "a: b: c\n",
    "- a\nb: 1\n",
    "a: &x 1\nb: *x\n",
    "{a: 1, a: 2}",
    "a: .nan\n",
    "\t- x",
    "key: 'unterminated\n",
    "%YAML 1.1\n---\na: 1\n",
    "a: !custom 1\n",
    "---\n...\n",
    "",
    "a: 0o17\nb: 0x1f\nc: 1_000\nd: 2001-12-14\ne: yes\nf: ~\ng: 1e3\nh: '1e3'\n",
    '{"id": "plan-1", "accept": [{"path": "x", "max_shift_pct": 2.5}]}',
    "[" * 70 + "]" * 70,  # deeper than libyaml is trusted with: the pure-Python loader
    "[" * 400 + "]" * 400,  # too deep for either
]


def _outcome(text: str, *, fast: bool) -> tuple[str, object]:
    try:
        return "ok", docio._load_yaml(text, source="t.yaml", fast=fast)
    except Exception as exc:
        return type(exc).__name__, str(exc)


@pytest.mark.parametrize("text", YAML_CASES, ids=range(len(YAML_CASES)))
def test_docio_yaml_through_libyaml_reads_and_refuses_as_the_pure_python_loader(text: str) -> None:
    assert docio._CSafeLoader is not None, "PyYAML without libyaml: the fast path is not exercised"
    assert _outcome(text, fast=True) == _outcome(text, fast=False)


def test_docio_yaml_through_libyaml_reads_the_shipped_documents_identically() -> None:
    paths = sorted((Path(docio.__file__).parent / "data").glob("*.yaml"))
    assert paths
    for path in paths:
        text = path.read_text(encoding="utf-8")
        assert docio._load_yaml(text, source=str(path), fast=True) == docio._load_yaml(
            text, source=str(path), fast=False
        )


def test_docio_read_bytes_reads_files_whose_size_is_not_their_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regular file is read in one call sized by fstat; one that says 0 bytes (/proc, sysfs) or grew
    since is still read to its end, and the bound holds past the stated size."""
    import os

    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    assert b"Name:" in docio.read_bytes(status)
    grown = tmp_path / "grown.json"
    grown.write_bytes(b"x" * 200_000)
    real_fstat = os.fstat
    with grown.open("ab") as fh:

        def stale(fd: int) -> os.stat_result:  # the file grows after its size is read
            info = real_fstat(fd)
            fh.write(b"y" * 100_000)
            fh.flush()
            return info

        with monkeypatch.context() as patched:
            patched.setattr(os, "fstat", stale)
            data = docio.read_bytes(grown)
            assert len(data) == 300_000 and data.endswith(b"y")
            with pytest.raises(InputError, match="over the 350000 bytes a document may have"):
                docio.read_bytes(grown, limit=350_000)  # says 300,000, holds 400,000


def test_docio_read_bytes_reads_a_pipe_longer_than_its_buffer() -> None:
    """A pipe (`--plan <(...)`, /dev/fd/N) is read by 64 KiB to its end: 1 MiB from a writer thread."""
    import os
    import threading

    payload = bytes(range(256)) * 4096
    read_end, write_end = os.pipe()

    def write() -> None:
        with os.fdopen(write_end, "wb") as fh:
            fh.write(payload)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert docio.read_bytes(Path(f"/proc/self/fd/{read_end}")) == payload
    finally:
        writer.join(timeout=10)
        os.close(read_end)


def _leaves(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every leaf of a JSON document, the first two items of each array only."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from _leaves(sub, (*path, key))
    elif isinstance(value, list):
        for i, sub in enumerate(value[:2]):
            yield from _leaves(sub, (*path, i))
    else:
        yield path, value


def _edits(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [None, "true", 1]
    if isinstance(value, str):
        return [value.upper() + "X", "", None, 7, "x" * 5000, "2025-06-08 10:00:00"]
    if isinstance(value, int):
        return [-1, 2**40, None, "1", 1.5]
    if isinstance(value, float):
        return [-1.0, None, "1.0"]
    return ["x", 1]


def test_docio_fast_snapshot_reader_refuses_every_one_field_edit_the_schema_refuses() -> None:
    """`gate` reads candidates with `load_snapshot_fast` (strict typed decode, no schema walk). One edit at
    a time to every field of a snapshot with a kernel event, a library and an evidence issue: whatever the
    schema path refuses (schema, then the model's constraints), the fast reader refuses too, and what both
    accept decodes the same. It once accepted a kernel event of severity "FATAL" (not an enum value: the
    judge saw no fatal event and passed the node), schema_version "2" and taken_at "not a time"."""
    import copy

    from upgrade_gate import codec, schemas
    from upgrade_gate.errors import GateError
    from upgrade_gate.model import EvidenceIssue, IssueKind, KernelEvent, RocmLibrary, Snapshot, replace

    snap = replace(
        mi300x_snapshot(),
        events=(KernelEvent(kind="amdgpu.gpu_reset", severity="fatal", bdf=None, line_no=3, text="GPU reset begin!"),),
        libraries=(
            RocmLibrary(
                soname="libamdhip64.so.6",
                path="/opt/rocm/lib/libamdhip64.so.6.2.60200",
                symbols_sha256="a" * 64,
                symbol_count=10,
                file_sha256="b" * 64,
            ),
        ),
        evidence_issues=(EvidenceIssue(kind=IssueKind.CONFLICT, subject="software.driver_version", message="m"),),
    )
    document = codec.to_jsonable(snap)
    validate = schemas._fast_validator("snapshot")  # the schema path's verdict, without its slower message

    def schema_path(data: Any) -> Snapshot | None:
        try:
            validate(data)
            return codec.from_jsonable(Snapshot, data)
        except Exception:
            return None

    def fast(raw: bytes) -> Snapshot | None:
        try:
            return codec.decode_json(Snapshot, raw, source="candidate.json")
        except GateError:
            return None

    differ = []
    cases = 0
    for path, value in _leaves(document):
        for edit in _edits(value):
            data = copy.deepcopy(document)
            place: Any = data
            for step in path[:-1]:
                place = place[step]
            place[path[-1]] = edit
            raw = json.dumps(data).encode()
            cases += 1
            if schema_path(json.loads(raw)) != fast(raw):
                differ.append(f"{'.'.join(map(str, path))} = {str(edit)[:24]!r}")
    assert cases > 1000
    assert not differ, f"the readers disagree on {len(differ)} edit(s): {differ[:12]}"
