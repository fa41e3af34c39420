"""dcgmi diag parser (issue 30): the DCGM 3.x/4.x text table and the 3.x JSON, and the bad-input forms.

The recorded outputs (`tests/fixtures/dcgmi/`, corpus copies) are golden-tested and their refusals
pinned in `tests/test_parse_corpus.py`. Rows quoted below come verbatim from public issue threads (named
at each); where a thread quotes only part of a table, the quoted rows are framed by the border and section
lines of the corpus p4de table, which is the only derivation.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import FIXTURES
from upgrade_gate.errors import ParseError
from upgrade_gate.parse.dcgmi import parse_dcgmi_diag

P4DE = "a100x8-p4de-diag-r2-nvlinks-expected-up-dcgm3.3.3.txt"
FRAGMENT = "fragment-deployment-error-row-remap-pending.txt"
BORDER = "+---------------------------+------------------------------------------------+"
HEAD = [
    BORDER,
    "| Diagnostic                | Result                                         |",
    "+===========================+================================================+",
]

# NVIDIA/go-dcgm #52 (DCGM 3.3.1, `dcgmi diag -r 2 -g 0`): GPU 0 fails, GPU 1 passes.
GO_DCGM_52_HARDWARE = [
    "+-----  Hardware  ----------+------------------------------------------------+",
    "| GPU Memory                | Pass - GPU: 1                                  |",
    "|                           | Fail - GPU: 0                                  |",
    "| Warning                   | GPU 0 Error using CUDA API cuCtxCreate Check   |",
    "|                           | DCGM and system logs for errors. Reset GPU. R  |",
    "|                           | estart DCGM. Rerun diagnostics. Unable to cre  |",
    "|                           | ate CUDA context: 'CUDA-capable device(s) is/  |",
    "|                           | are busy or unavailable'.                      |",
    "| Info                      | GPU 1 Allocated 15568304202 bytes (98.3%)      |",
    "| Diagnostic                | Fail - All                                     |",
    "| Warning                   | GPU 0 API call cuMemGetInfo failed: 'context   |",
    "|                           | is destroyed' Check DCGM and system logs for   |",
    "|                           | errors. Reset GPU. Restart DCGM. Rerun diagno  |",
    "|                           | stics.                                         |",
]

# NVIDIA/DCGM #253 (DCGM 4.2.3): the 4.x layout, one result row per GPU under `software`.
DCGM_253 = [
    "Successfully ran diagnostic for group.",
    *HEAD,
    "|-----  Metadata  ----------+------------------------------------------------|",
    "| DCGM Version              | 4.2.3                                          |",
    "| Driver Version Detected   | 570.148.08                                     |",
    "| GPU Device IDs Detected   | 26b9, 26b9, 26b9, 26b9                         |",
    "|-----  Deployment  --------+------------------------------------------------|",
    "| software                  | Pass                                           |",
    "|                           | GPU0: Pass                                     |",
    "|                           | GPU1: Pass                                     |",
    "|                           | GPU2: Pass                                     |",
    "|                           | GPU3: Pass                                     |",
]


def _table(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def _text(name: str) -> str:
    return (FIXTURES / "dcgmi" / name).read_text(encoding="utf-8")


def test_dcgmi_reads_metadata_and_every_pass_of_the_p4de_run() -> None:
    diag = parse_dcgmi_diag(_text(P4DE))
    assert (diag.form, diag.dcgm_version, diag.driver_version) == ("text", "3.3.3", "535.104.12")
    assert diag.device_ids == ("20b2",) * 8
    assert [(t.category, t.name) for t in diag.tests][-2:] == [("Integration", "PCIe"), ("Hardware", "GPU Memory")]
    assert all(r.status == "Pass" for t in diag.tests for r in t.results) and diag.failed == ()


def test_dcgmi_joins_a_message_wrapped_mid_word_and_keeps_per_gpu_results() -> None:
    lines = _text(P4DE).splitlines()
    stress = lines.index("+-----  Stress  ------------+------------------------------------------------+")
    at = lines.index("+-----  Hardware  ----------+------------------------------------------------+")
    diag = parse_dcgmi_diag(_table(lines[:at] + GO_DCGM_52_HARDWARE + lines[stress:]))
    memory = next(t for t in diag.tests if t.name == "GPU Memory")
    assert [(r.status, r.gpus) for r in memory.results] == [("Pass", (1,)), ("Fail", (0,))]
    assert memory.warnings == (
        "GPU 0 Error using CUDA API cuCtxCreate Check DCGM and system logs for errors. Reset GPU. Restart DCGM. "
        "Rerun diagnostics. Unable to create CUDA context: 'CUDA-capable device(s) is/are busy or unavailable'.",
    )
    assert memory.info == ("GPU 1 Allocated 15568304202 bytes (98.3%)",)
    diagnostic = next(t for t in diag.tests if t.name == "Diagnostic")
    assert diagnostic.results[0].status == "Fail" and diagnostic.results[0].gpus is None
    assert diagnostic.warnings[0].startswith("GPU 0 API call cuMemGetInfo failed: 'context is destroyed' Check")
    assert diagnostic.warnings[0].endswith("Restart DCGM. Rerun diagnostics.")
    assert {t.name for t in diag.failed} == {"GPU Memory", "Diagnostic"}


def test_dcgmi_reads_the_dcgm4_per_gpu_rows() -> None:
    diag = parse_dcgmi_diag(_table([*DCGM_253, BORDER]))
    assert diag.dcgm_version == "4.2.3" and diag.device_ids == ("26b9",) * 4
    software = diag.tests[0]
    assert [(r.status, r.gpus) for r in software.results] == [("Pass", None)] + [("Pass", (g,)) for g in range(4)]


def test_dcgmi_reads_a_section_level_error_of_the_fragment_once_closed() -> None:
    diag = parse_dcgmi_diag(_text(FRAGMENT) + BORDER + "\n")
    assert diag.tests[0].errors == ("GPU 3 has uncorrectable memory errors and row remappings are pending",)
    assert diag.failed == diag.tests


def test_dcgmi_refuses_a_table_cut_before_its_closing_border() -> None:
    with pytest.raises(ParseError, match="without its closing border: output cut"):
        parse_dcgmi_diag(_table(DCGM_253))


def test_dcgmi_refuses_kubectl_banners_prompts_and_dcgmi_errors_before_the_table() -> None:
    # IBM/autopilot #68: kubectl's stderr banner captured with the output.
    banner = 'Defaulted container "nvidia-dcgm-ctr" out of: nvidia-dcgm-ctr, toolkit-validation (init)'
    with pytest.raises(ParseError, match="text before the table"):
        parse_dcgmi_diag(banner + "\n" + _text(P4DE))
    with pytest.raises(ParseError, match="dcgmi reported an error"):
        parse_dcgmi_diag("Error: unable to establish a connection to the specified host: localhost\n")
    with pytest.raises(ParseError, match="empty output"):
        parse_dcgmi_diag("\n")


def test_dcgmi_refuses_wrapped_rows_and_results_that_are_not_results() -> None:
    text = _text(P4DE)
    with pytest.raises(ParseError, match="does not fit the table's columns"):
        parse_dcgmi_diag(
            text.replace("| PCIe                      | Pass - All", "| PCIe                      |\nPass - All", 1)
        )
    with pytest.raises(ParseError, match="'Unknown' is not a diagnostic result"):
        parse_dcgmi_diag(
            text.replace("| Inforom                   | Pass   ", "| Inforom                   | Unknown", 1)
        )


def test_dcgmi_strips_ansi_remnants() -> None:
    text = _text(P4DE)
    assert parse_dcgmi_diag("\x1b[0m" + text.replace("| Denylist", "^[[1m| Denylist", 1)) == parse_dcgmi_diag(text)


# --------------------------------------------------------------------------- JSON (-j)


def _json_run(status: str = "Skip", root: str = "DCGM GPU Diagnostic") -> str:
    """A `dcgmi diag -j` document in the shape NVIDIA's nvvs JsonOutput.cpp documents (software tests: one
    result for all GPUs, "gpu_ids" a CSV; others one result per GPU), with the "gpu_id" key and the "Skip"
    status of the run NVIDIA/DCGM #139 pastes. No complete real JSON run is in the corpus."""
    doc = {
        root: {
            "test_categories": [
                {
                    "category": "Deployment",
                    "tests": [
                        {
                            "name": "Persistence Mode",
                            "results": [
                                {
                                    "gpu_ids": "0,1",
                                    "status": "Warn",
                                    "warnings": [
                                        {"warning": "Persistence mode for GPU 0 is disabled.", "error_id": 29}
                                    ],
                                }
                            ],
                        }
                    ],
                },
                {
                    "category": "Hardware",
                    "tests": [{"name": "GPU Memory", "results": [{"gpu_id": "0", "status": status}]}],
                },
            ],
            "version": "3.3.3",
        }
    }
    return json.dumps(doc, indent="\t")


def test_dcgmi_json_reads_categories_results_and_warnings() -> None:
    diag = parse_dcgmi_diag(_json_run())
    assert diag.form == "json" and diag.dcgm_version == "3.3.3"
    assert [(t.category, t.name, [(r.status, r.gpus) for r in t.results]) for t in diag.tests] == [
        ("Deployment", "Persistence Mode", [("Warn", (0, 1))]),
        ("Hardware", "GPU Memory", [("Skip", (0,))]),
    ]
    assert diag.tests[0].warnings == ("Persistence mode for GPU 0 is disabled.",)


def test_dcgmi_json_refuses_unknown_statuses_the_4x_root_and_broken_json() -> None:
    with pytest.raises(ParseError, match="status is not one of"):
        parse_dcgmi_diag(_json_run(status="SKIPPED"))
    with pytest.raises(ParseError, match=r"DCGM 4\.x JSON"):
        parse_dcgmi_diag(_json_run(root="DCGM Diagnostic"))
    with pytest.raises(ParseError, match="invalid JSON"):
        parse_dcgmi_diag(_json_run()[:-40])
