"""Hostile input through the real entry point: bundle bombs, YAML bombs, non-finite numbers, forged
manifests, a probe that floods its output. Each asserts the exit code, the one-line message and a peak
memory bound (the child's ru_maxrss, measured by a wrapper process so that only that one command
counts). Timing is measured in bench/bench_hostile.py, never asserted here."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from tests.test_cli_exit_codes import env_with, one_error_line
from upgrade_gate.collect.bundle import write_bundle
from upgrade_gate.collect.capture import capture
from upgrade_gate.collect.probes import Probe
from upgrade_gate.collect.runner import LocalRunner
from upgrade_gate.errors import ExitCode

MiB = 1024 * 1024
PEAK_LIMIT_MIB = 256

_MEASURE = textwrap.dedent(
    """
    import resource, subprocess, sys
    proc = subprocess.run(sys.argv[1:], capture_output=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
    sys.stdout.buffer.write(b"%d\\n%d\\n" % (proc.returncode, peak))
    sys.stdout.buffer.write(proc.stderr)
    """
)


def measured(*args: str, env: dict[str, str] | None = None) -> tuple[int, float, str]:
    """Run `python -m upgrade_gate ARGS` under a wrapper: (exit code, peak RSS in MiB, stderr)."""
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, sys.executable, "-m", "upgrade_gate", *args],
        capture_output=True,
        env=env or env_with(),
        timeout=300,
        check=True,
    ).stdout.decode("utf-8", "replace")
    code, peak, stderr = out.split("\n", 2)
    return int(code), int(peak) / 1024, stderr


# --------------------------------------------------------------------------- bundles


def tiny_bundle(tmp_path: Path) -> Path:
    """A real, valid bundle of one probe (uname -r), as capture writes it."""
    probes = [Probe(name="kernel", argv=("uname", "-r"), parser="uname-r")]
    bundle = capture(LocalRunner(), node="n1", probes=probes)
    return write_bundle(bundle, tmp_path / "good.tar.gz")


def members_of(path: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        out = []
        for m in tar:
            handle = tar.extractfile(m)
            out.append((m, handle.read() if handle is not None else b""))
        return out


def pax_bomb(tmp_path: Path) -> Path:
    """A gzip of ~1 MB whose first member is a pax extended header claiming 1 GiB."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = 1024 * MiB
    raw = header.tobuf(tarfile.USTAR_FORMAT)
    path = tmp_path / "pax-bomb.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(raw)
        record = b"%d path=%s\n" % (30, b"x" * 22)  # some valid-looking records, then zeros
        gz.write(record)
        chunk = b"\0" * MiB
        for _ in range(1024):
            gz.write(chunk)
    return path


def gnu_longname_bomb(tmp_path: Path) -> Path:
    header = tarfile.TarInfo("././@LongLink")
    header.type = tarfile.GNUTYPE_LONGNAME
    header.size = 2048 * MiB
    path = tmp_path / "longname-bomb.tar.gz"
    with gzip.open(path, "wb", compresslevel=9) as gz:
        gz.write(header.tobuf(tarfile.USTAR_FORMAT))
        chunk = b"a" * MiB
        for _ in range(1024):
            gz.write(chunk)
    return path


def unlisted_bomb(tmp_path: Path) -> Path:
    """A valid bundle (manifest first) followed by many 30 MiB members the manifest does not name."""
    good = members_of(tiny_bundle(tmp_path))
    path = tmp_path / "unlisted.tar.gz"
    with (
        gzip.open(path, "wb", compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for info, data in good:
            tar.addfile(info, io.BytesIO(data))
        for i in range(20):
            info = tarfile.TarInfo(f"probes/extra{i}.stdout")
            info.size = 30 * MiB
            tar.addfile(info, io.BytesIO(b"\0" * info.size))
    return path


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (pax_bomb, "refused: a pax extended header of 1073741824 bytes (limit 65536)"),
        (gnu_longname_bomb, "refused: a GNU long name of 2147483648 bytes (limit 4096)"),
        (unlisted_bomb, "refused member 'probes/extra0.stdout': not named in the manifest"),
    ],
)
def test_tar_bombs_are_refused_from_the_header_with_bounded_memory(tmp_path: Path, make: object, message: str) -> None:
    bomb = make(tmp_path)  # type: ignore[operator]
    code, peak, stderr = measured("snapshot", str(bomb))
    assert code == ExitCode.BAD_INPUT, stderr
    assert message in one_error_line(stderr)
    assert peak < PEAK_LIMIT_MIB, f"peak RSS {peak:.0f} MiB"


def test_unlisted_member_before_the_manifest_is_refused_when_the_manifest_arrives(tmp_path: Path) -> None:
    good = members_of(tiny_bundle(tmp_path))
    path = tmp_path / "repacked.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        extra = tarfile.TarInfo("probes/zzz.stdout")
        extra.size = 3
        tar.addfile(extra, io.BytesIO(b"abc"))
        for info, data in reversed(good):  # probes first, manifest last: a re-packed folder
            tar.addfile(info, io.BytesIO(data))
    code, _, stderr = measured("snapshot", str(path))
    assert code == ExitCode.BAD_INPUT
    assert "refused member 'probes/zzz.stdout': not named in the manifest" in one_error_line(stderr)


def test_repacked_bundle_with_the_manifest_last_still_loads(tmp_path: Path) -> None:
    from upgrade_gate.collect.bundle import load_bundle

    good = members_of(tiny_bundle(tmp_path))
    path = tmp_path / "repacked.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, data in reversed(good):
            tar.addfile(info, io.BytesIO(data))
    bundle = load_bundle(path)
    record = bundle.record("kernel")
    assert record is not None and record.ok and record.result.stdout.strip()


# --------------------------------------------------------------------------- forged manifests (issue 10 #5)


def _rewrite_manifest(src: Path, dst: Path, edit: object) -> Path:
    members = members_of(src)
    with tarfile.open(dst, "w:gz") as tar:
        for info, data in members:
            if info.name == "manifest.json":
                doc = json.loads(data)
                edit(doc)  # type: ignore[operator]
                data = json.dumps(doc).encode()
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return dst


def test_a_command_probe_marked_skipped_is_a_forged_bundle(tmp_path: Path) -> None:
    probes = [Probe(name="dmesg", argv=("uname", "-a"), parser="dmesg")]
    good = write_bundle(capture(LocalRunner(), node="n1", probes=probes), tmp_path / "dmesg.tar.gz")

    def forge(doc: dict[str, object]) -> None:
        probe = doc["probes"][0]  # type: ignore[index]
        probe.update(skipped=True, note="no files matched")

    forged = _rewrite_manifest(good, tmp_path / "forged.tar.gz", forge)
    code, _, stderr = measured("snapshot", str(forged))
    assert code == ExitCode.BAD_INPUT
    line = one_error_line(stderr)
    assert "probe 'dmesg' is marked skipped" in line and "forged or corrupt bundle" in line


def test_a_file_probe_skipped_with_output_is_a_forged_bundle(tmp_path: Path) -> None:
    from upgrade_gate.collect.probes import GREP_ARGV

    probes = [Probe(name="driver_version", argv=("uname", "-r"), parser="sysfs-grep")]
    good = write_bundle(capture(LocalRunner(), node="n1", probes=probes), tmp_path / "g.tar.gz")

    def forge(doc: dict[str, object]) -> None:
        doc["probes"][0].update(skipped=True, note="no files matched", argv=list(GREP_ARGV))  # type: ignore[index]

    forged = _rewrite_manifest(good, tmp_path / "forged.tar.gz", forge)
    code, _, stderr = measured("snapshot", str(forged))
    assert code == ExitCode.BAD_INPUT
    assert "marked skipped but has output" in one_error_line(stderr)


# --------------------------------------------------------------------------- YAML and numbers

ALIAS_BOMB = textwrap.dedent(
    """\
    a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
    b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
    c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
    d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
    e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
    f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
    g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
    h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
    i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
    ignore_paths: *i
    """
)


@pytest.mark.parametrize("flag", ["--policy", "--plan"])
def test_yaml_alias_bomb_is_refused_at_once(tmp_path: Path, flag: str) -> None:
    doc = tmp_path / "bomb.yaml"
    doc.write_text(ALIAS_BOMB, encoding="utf-8")
    snap = tmp_path / "s.json"
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.snapshot.io import write_snapshot

    write_snapshot(mi300x_snapshot(), snap)
    code, peak, stderr = measured("diff", str(snap), str(snap), flag, str(doc))
    assert code == ExitCode.BAD_INPUT, stderr
    assert "YAML aliases are refused (*a)" in one_error_line(stderr)
    assert peak < PEAK_LIMIT_MIB


def test_cvf_config_alias_is_refused(tmp_path: Path) -> None:
    from upgrade_gate.errors import ConfigError
    from upgrade_gate.validate.config import load_cvf_config

    doc = tmp_path / "cvf.yaml"
    doc.write_text("x: &x '100'\nPHASE2_BW_THRESHOLD: *x\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"at line 2: YAML aliases are refused \(\*x\)"):
        load_cvf_config(doc)


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf", ".NaN"])
def test_non_finite_policy_threshold_exits_3_naming_the_key(tmp_path: Path, value: str) -> None:
    from upgrade_gate.errors import ConfigError
    from upgrade_gate.judge.policy import load_policy

    policy = tmp_path / "p.yaml"
    policy.write_text(f"thresholds:\n  mesh_avg_busbw_min_gbs: {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\$\.thresholds\.mesh_avg_busbw_min_gbs: .* is not a finite number"):
        load_policy(policy)


def test_non_finite_plan_value_exits_3_through_the_cli(tmp_path: Path) -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text("id: x\naccept:\n  - {path: a, max_shift_pct: .nan}\n", encoding="utf-8")
    snap = tmp_path / "s.json"
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.snapshot.io import write_snapshot

    write_snapshot(mi300x_snapshot(), snap)
    code, _, stderr = measured("diff", str(snap), str(snap), "--plan", str(plan))
    assert code == ExitCode.BAD_INPUT
    assert "$.accept[0].max_shift_pct: nan is not a finite number" in one_error_line(stderr)


@pytest.mark.parametrize("token", ["NaN", "Infinity", "-Infinity", "1e400"])
def test_non_finite_json_numbers_in_a_snapshot_are_refused(tmp_path: Path, token: str) -> None:
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.snapshot.io import dumps_snapshot

    text = dumps_snapshot(mi300x_snapshot())
    doc = json.loads(text)
    doc["gpus"][0]["vram_total_mib"] = 0.5  # a float slot to swap for the token
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps(doc).replace("0.5", token), encoding="utf-8")
    code, _, stderr = measured("diff", str(snap), str(snap))
    assert code == ExitCode.BAD_INPUT
    assert "is not a finite number" in one_error_line(stderr)


def test_schema_error_message_never_renders_a_huge_instance(tmp_path: Path) -> None:
    from upgrade_gate import schemas
    from upgrade_gate.errors import SchemaError

    with pytest.raises(SchemaError) as info:
        schemas.validate("policy", {"ignore_paths": "x" * 10_000_000}, source="p.yaml")
    assert len(str(info.value)) < 1000


# --------------------------------------------------------------------------- probe output cap


def test_a_flooding_probe_is_capped_recorded_failed_and_the_bundle_stays_readable(tmp_path: Path) -> None:
    from tests.test_collect_capture import fake_node
    from upgrade_gate.collect.bundle import load_bundle
    from upgrade_gate.collect.runner import DEFAULT_OUTPUT_LIMIT

    yes = "/usr/bin/yes" if Path("/usr/bin/yes").exists() else "/bin/yes"
    bindir, root = fake_node(tmp_path, dmesg=f"exec {yes} '[    1.000000] amdgpu 0000:05:00.0: flood'")
    out = tmp_path / "b.tar.gz"
    code, peak, stderr = measured(
        "capture", "--node", "n1", "--out", str(out), "--host-root", str(root), env=env_with(PATH=str(bindir))
    )
    assert code == ExitCode.PASS, stderr
    assert peak < PEAK_LIMIT_MIB
    record = load_bundle(out).record("dmesg")
    assert record is not None and not record.ok
    assert record.reason == f"dmesg: output over {DEFAULT_OUTPUT_LIMIT // MiB} MiB (stopped reading, process killed)"
    assert len(record.result.stdout) == DEFAULT_OUTPUT_LIMIT
    probe = next(p for p in json.loads(members_of(out)[0][1])["probes"] if p["name"] == "dmesg")
    assert probe["output_over"] == DEFAULT_OUTPUT_LIMIT and probe["exit_code"] is None
    # The snapshot records the probe as failed, which the judge turns into a blocking finding.
    from upgrade_gate.snapshot.build import snapshot_from_bundle

    snap = snapshot_from_bundle(out)
    failed = {p.name: p for p in snap.probes if not p.ok}
    assert "dmesg" in failed and "output over" in (failed["dmesg"].reason or "")


# --------------------------------------------------------------------------- schema maxima


@pytest.mark.parametrize(
    ("edit", "where"),
    [
        (lambda d: d.__setitem__("gpus", d["gpus"] * 1251), "$.gpus"),
        (lambda d: d.__setitem__("nics", (d["nics"] or [{}]) * 300), "$.nics"),
        (lambda d: d["gpus"][0].__setitem__("index", 10**12), "$.gpus[0].index"),
        (lambda d: d["gpus"][0].__setitem__("serial", "S" * 100_000), "$.gpus[0].serial"),
    ],
)
def test_snapshot_over_the_schema_maxima_is_refused_cheaply(tmp_path: Path, edit: object, where: str) -> None:
    from tests.judge_scenarios import mi300x_snapshot
    from upgrade_gate.snapshot.io import dumps_snapshot

    doc = json.loads(dumps_snapshot(mi300x_snapshot()))
    edit(doc)  # type: ignore[operator]
    snap = tmp_path / "s.json"
    snap.write_text(json.dumps(doc), encoding="utf-8")
    code, peak, stderr = measured("diff", str(snap), str(snap))
    assert code == ExitCode.BAD_INPUT, stderr
    line = one_error_line(stderr)
    assert f"snapshot schema: {where}" in line and len(line) < 1000
    assert peak < PEAK_LIMIT_MIB


def test_bench_hostile_runs_one_attack() -> None:
    from bench import bench_hostile

    (outcome,) = bench_hostile.run_attacks(["nan"], timeout=120)
    assert outcome.code == "3" and "is not a finite number" in outcome.message
    assert "| nan |" in bench_hostile.render([outcome])


def test_the_gate_blocks_naming_a_probe_whose_output_was_capped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from upgrade_gate.cli.main import run
    from upgrade_gate.fakenode import Faults, build_fake_node, mi300x_node
    from upgrade_gate.snapshot.build import build_snapshot
    from upgrade_gate.store.gitstore import BaselineStore

    node = build_fake_node(tmp_path / "node", mi300x_node("fake-node-01"), Faults())
    healthy = capture(LocalRunner(env=node.env(os.environ)), node="fake-node-01", host_root=node.host_root)
    with BaselineStore(tmp_path / "store") as st:
        st.save([build_snapshot(healthy)])
    yes = "/usr/bin/yes" if Path("/usr/bin/yes").exists() else "/bin/yes"
    (node.bin_dir / "dmesg").unlink()
    (node.bin_dir / "dmesg").write_text(f"#!/bin/sh\nexec {yes} '[    1.000000] amdgpu: flood'\n")
    (node.bin_dir / "dmesg").chmod(0o755)
    runner = LocalRunner(env=node.env(os.environ), output_limit=1 * MiB)  # a small cap keeps the test quick
    flooded = capture(runner, node="fake-node-01", host_root=node.host_root)
    write_bundle(flooded, tmp_path / "flooded.tar.gz")
    policy = tmp_path / "capture-only.yaml"
    policy.write_text("phases: {not_applicable: {'*': [1, 2, 3, 4, 5]}}\n", encoding="utf-8")
    args = ["gate", "--store", str(tmp_path / "store"), "--candidate", str(tmp_path / "flooded.tar.gz")]
    code = run([*args, "--policy", str(policy)])
    out = capsys.readouterr().out
    assert code == ExitCode.BLOCK, out
    assert "dmesg" in out and "output over 1 MiB" in out
