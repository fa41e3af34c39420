"""Bundle reading is safe and strict: hostile tarballs and folders are refused with one-line exit-3
errors naming the member, manifests are schema-checked naming the field, nothing is written anywhere."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from upgrade_gate.collect.bundle import (
    MANIFEST,
    Bundle,
    ProbeRecord,
    bundle_payload,
    load_bundle,
    write_bundle,
)
from upgrade_gate.collect.members import DEFAULT_LIMITS, BundleLimits
from upgrade_gate.collect.runner import CommandResult
from upgrade_gate.errors import BundleError, EnvironmentFailure, ExitCode, NotFoundError, SchemaError
from upgrade_gate.model import NodeName


def _bundle() -> Bundle:
    def record(name: str, argv: tuple[str, ...], stdout: str) -> ProbeRecord:
        result = CommandResult(argv=argv, returncode=0, stdout=stdout, stderr="", duration_s=0.25)
        return ProbeRecord(name=name, parser=name, required=True, timeout_s=30.0, result=result)

    return Bundle(
        node=NodeName("gpu-1"),
        hostname="gpu-1",
        taken_at="2025-06-01T12:00:00Z",
        tool_version="0.1.0",
        host_root="/",
        records=(record("rocminfo", ("rocminfo",), "agents\n"), record("kernel", ("uname", "-r"), "6.8.0\n")),
    )


def _member(name: str, data: bytes = b"", kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info


def _tar(path: Path, members: Iterable[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _good_members(payload: dict[str, bytes] | None = None) -> list[tuple[tarfile.TarInfo, bytes]]:
    files = payload if payload is not None else bundle_payload(_bundle())
    return [(_member(name, data), data) for name, data in sorted(files.items())]


def _snapshot_tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _refused(path: Path, match: str, limits: BundleLimits | None = None) -> BundleError:
    before = _snapshot_tree(path.parent)
    with pytest.raises(BundleError, match=match) as info:
        load_bundle(path, limits=limits or BundleLimits())
    assert _snapshot_tree(path.parent) == before  # nothing extracted, nothing written
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in str(info.value)
    return info.value


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("../evil", "escapes"),
        ("probes/../../evil", "escapes"),
        ("/etc/evil", "absolute"),
        ("probes//x.stdout", "escapes"),
    ],
)
def test_load_bundle_refuses_traversal_member(tmp_path: Path, name: str, why: str) -> None:
    path = _tar(tmp_path / "b.tar.gz", [*_good_members(), (_member(name, b"x"), b"x")])
    error = _refused(path, why)
    assert repr(name) in str(error)
    assert not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize(
    ("kind", "link", "why"),
    [
        (tarfile.SYMTYPE, "/etc/passwd", "symlink to '/etc/passwd'"),
        (tarfile.LNKTYPE, "manifest.json", "hardlink"),
        (tarfile.CHRTYPE, "", "device"),
        (tarfile.FIFOTYPE, "", "FIFO"),
    ],
)
def test_load_bundle_refuses_links_and_special_members(tmp_path: Path, kind: bytes, link: str, why: str) -> None:
    members = [m for m in _good_members() if m[0].name != "probes/rocminfo.stdout"]
    members.append((_member("probes/rocminfo.stdout", kind=kind, link=link), b""))
    path = _tar(tmp_path / "b.tar.gz", members)
    _refused(path, f"'probes/rocminfo.stdout': {why}")


def test_load_bundle_refuses_oversize_member(tmp_path: Path) -> None:
    bundle = _bundle()
    payload = bundle_payload(bundle)
    payload["probes/rocminfo.stdout"] = b"x" * 2048
    path = _tar(tmp_path / "b.tar.gz", _good_members(payload))
    _refused(path, "'probes/rocminfo.stdout': 2048 bytes is over the 1024-byte", BundleLimits(max_member_bytes=1024))


def test_load_bundle_refuses_oversize_total(tmp_path: Path) -> None:
    path = write_bundle(_bundle(), tmp_path / "b.tar.gz")
    _refused(path, "bundle is over the 100-byte limit", BundleLimits(max_total_bytes=100))


def test_load_bundle_refuses_huge_header_before_reading_content(tmp_path: Path) -> None:
    # A header that claims 100 GiB with no content behind it: refused from the header alone.
    info = tarfile.TarInfo("probes/rocminfo.stdout")
    info.size = 100 * 1024**3
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(gzip.compress(info.tobuf(tarfile.PAX_FORMAT) + b"\0" * 1024))
    _refused(path, f"over the {DEFAULT_LIMITS.max_member_bytes}-byte member limit")


def test_load_bundle_refuses_member_not_in_manifest(tmp_path: Path) -> None:
    path = _tar(tmp_path / "b.tar.gz", [*_good_members(), (_member("probes/extra.stdout", b"x"), b"x")])
    _refused(path, "'probes/extra.stdout': not named in the manifest")


def test_load_bundle_refuses_stray_folder(tmp_path: Path) -> None:
    path = _tar(tmp_path / "b.tar.gz", [*_good_members(), (_member("cache", kind=tarfile.DIRTYPE), b"")])
    _refused(path, "'cache': folder not named in the manifest")


def test_load_bundle_accepts_tar_of_bundle_folder_with_dot_prefix(tmp_path: Path) -> None:
    folder = write_bundle(_bundle(), tmp_path / "bundle")
    path = tmp_path / "repacked.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=".")  # as `tar -C bundle -czf repacked.tar.gz .` writes it
    assert load_bundle(path) == _bundle()


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (lambda raw: raw[:-8] + bytes(b ^ 0xFF for b in raw[-8:-4]) + raw[-4:], "CRC check failed"),
        (lambda raw: raw[:-8], "ended before the end-of-stream marker"),
        (lambda raw: raw + b"\x8f" * 64 + b"garbage", "Not a gzipped file"),
    ],
)
def test_load_bundle_refuses_a_gzip_stream_damaged_after_the_last_member(
    tmp_path: Path, damage: Callable[[bytes], bytes], why: str
) -> None:
    """gzip checks its CRC and length only at the end of the stream, which tarfile never read: a flipped CRC, a
    cut trailer and bytes after the stream loaded as valid evidence (break test 2026-12-07)."""
    path = write_bundle(_bundle(), tmp_path / "b.tar.gz")
    load_bundle(path)  # whole, it loads
    path.write_bytes(damage(path.read_bytes()))
    _refused(path, why)


def test_load_bundle_refuses_data_after_the_end_of_a_plain_tar(tmp_path: Path) -> None:
    path = tmp_path / "b.tar"
    with tarfile.open(path, "w") as tar:
        for info, data in _good_members():
            tar.addfile(info, io.BytesIO(data))
    load_bundle(path)  # GNU-style zero padding to the record: taken
    path.write_bytes(path.read_bytes() + b"not tar" + b"\0" * 505)
    _refused(path, "data after the end of the tar archive")


def test_load_bundle_missing_manifest(tmp_path: Path) -> None:
    members = [m for m in _good_members() if m[0].name != MANIFEST]
    _refused(_tar(tmp_path / "b.tar.gz", members), "no manifest.json in bundle")


def test_load_bundle_manifest_not_json(tmp_path: Path) -> None:
    payload = bundle_payload(_bundle())
    payload[MANIFEST] = b"{not json"
    _refused(_tar(tmp_path / "b.tar.gz", _good_members(payload)), r"b.tar.gz/manifest.json: not JSON")


def test_load_bundle_named_file_missing(tmp_path: Path) -> None:
    members = [m for m in _good_members() if m[0].name != "probes/kernel.stderr"]
    _refused(_tar(tmp_path / "b.tar.gz", members), "'probes/kernel.stderr' is named in the manifest but missing")


def test_load_bundle_not_a_tarball(tmp_path: Path) -> None:
    path = tmp_path / "b.tar.gz"
    path.write_bytes(b"\x1f\x8b garbage")
    _refused(path, "not a readable tar archive")


def test_load_bundle_no_such_path(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no such bundle"):
        load_bundle(tmp_path / "nope.tar.gz")


def _manifest_with(mutate: object) -> dict[str, bytes]:
    payload = bundle_payload(_bundle())
    manifest = json.loads(payload[MANIFEST])
    assert callable(mutate)
    mutate(manifest)
    payload[MANIFEST] = json.dumps(manifest).encode()
    return payload


@pytest.mark.parametrize(
    ("mutate", "path_in_error"),
    [
        (lambda m: m["probes"][0].__setitem__("exit_code", "zero"), r"\$\.probes\[0\]\.exit_code"),
        (lambda m: m["probes"][1].__setitem__("stdout", "../../etc/passwd"), r"\$\.probes\[1\]\.stdout"),
        (lambda m: m["probes"][0].pop("timed_out"), r"\$\.probes\[0\]: 'timed_out' is a required property"),
        (lambda m: m.__setitem__("node", "Bad_Node"), r"\$\.node"),
        (lambda m: m.__setitem__("schema_version", "2"), r"\$\.schema_version"),
        (lambda m: m["probes"][0].__setitem__("skipped", True), r"\$\.probes\[0\]\.note"),
    ],
)
def test_load_bundle_manifest_schema_error_names_file_and_field(
    tmp_path: Path, mutate: object, path_in_error: str
) -> None:
    path = _tar(tmp_path / "b.tar.gz", _good_members(_manifest_with(mutate)))
    with pytest.raises(SchemaError, match=rf"b\.tar\.gz/manifest\.json: manifest schema: {path_in_error}"):
        load_bundle(path)


def test_load_bundle_duplicate_probe_name(tmp_path: Path) -> None:
    payload = _manifest_with(lambda m: m["probes"][1].__setitem__("name", "rocminfo"))
    _refused(_tar(tmp_path / "b.tar.gz", _good_members(payload)), r"\$\.probes\[1\]\.name: duplicate 'rocminfo'")


def test_load_bundle_folder_refuses_symlink(tmp_path: Path) -> None:
    folder = write_bundle(_bundle(), tmp_path / "bundle")
    target = folder / "probes/rocminfo.stdout"
    target.unlink()
    target.symlink_to("/etc/passwd")
    _refused(folder, "'probes/rocminfo.stdout': symlink, not a regular file")


def test_load_bundle_folder_refuses_symlinked_folder(tmp_path: Path) -> None:
    folder = write_bundle(_bundle(), tmp_path / "bundle")
    (folder / "probes").rename(tmp_path / "elsewhere")
    (folder / "probes").symlink_to(tmp_path / "elsewhere")
    _refused(folder, "'probes': symlink")


def test_load_bundle_folder_refuses_fifo_and_extra_file(tmp_path: Path) -> None:
    folder = write_bundle(_bundle(), tmp_path / "bundle")
    os.mkfifo(folder / "probes/pipe")
    _refused(folder, "'probes/pipe': FIFO")
    (folder / "probes/pipe").unlink()
    (folder / "notes.txt").write_text("hi")
    _refused(folder, "'notes.txt': not named in the manifest")


def test_load_bundle_folder_refuses_oversize_file(tmp_path: Path) -> None:
    folder = write_bundle(_bundle(), tmp_path / "bundle")
    (folder / "probes/kernel.stdout").write_bytes(b"y" * 5000)
    _refused(folder, "'probes/kernel.stdout': 5000 bytes", BundleLimits(max_member_bytes=4096))


def test_write_bundle_refuses_non_empty_folder_with_exit_4(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("x")
    with pytest.raises(EnvironmentFailure, match="exists and is not an empty folder") as info:
        write_bundle(_bundle(), out)
    assert info.value.exit_code == ExitCode.ENVIRONMENT
    assert (out / "keep").read_text() == "x"


def test_write_bundle_into_empty_folder_and_leaves_no_temp(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    write_bundle(_bundle(), tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    assert load_bundle(tmp_path / "out") == _bundle()


def test_write_bundle_unwritable_parent_is_environment_failure(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(EnvironmentFailure, match="cannot write bundle"):
        write_bundle(_bundle(), tmp_path / "file" / "b.tar.gz")


def test_load_bundle_truncated_tarball(tmp_path: Path) -> None:
    path = write_bundle(_bundle(), tmp_path / "b.tar.gz")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    _refused(path, "b.tar.gz: not a readable tar archive")
