"""``gpusim specs``: list bundled specs; every value of one with unit and source."""

from __future__ import annotations

import json

from gpusim.cli import main
from gpusim.specs import PARAMS, available


def test_list(capsys):
    assert main(["specs"]) == 0
    text = capsys.readouterr().out
    for name in available():
        assert name in text


def test_list_json(capsys):
    assert main(["specs", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} == set(available())


def test_one_spec_every_value_with_unit_and_source(capsys):
    assert main(["specs", "--gpu", "v100", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc["params"]) == set(PARAMS)
    assert doc["params"]["sm_count"]["value"] == 80
    assert doc["params"]["clock_hz"]["unit"] == "Hz"
    assert all(v["source"].startswith("[") for v in doc["params"].values())


def test_one_spec_text(capsys):
    assert main(["specs", "--gpu", "h100"]) == 0
    text = capsys.readouterr().out
    assert "fp32_lanes_per_subpartition" in text and "lanes" in text


def test_unknown_gpu(capsys):
    assert main(["specs", "--gpu", "a100"]) == 2
    assert "unknown GPU 'a100'" in capsys.readouterr().err


def test_library_table_shown_where_measured(capsys):
    from gpusim.specs import LIBRARY_PARAMS

    assert main(["specs", "--gpu", "h100", "--json"]) == 0
    lib = json.loads(capsys.readouterr().out)["library"]
    assert set(lib) == set(LIBRARY_PARAMS)
    assert all("library_sweep.json" in v["source"] for v in lib.values())
    # the V100 was never measured: its table is the H100 fit transferred, and says so
    assert main(["specs", "--gpu", "v100", "--json"]) == 0
    lib = json.loads(capsys.readouterr().out)["library"]
    assert set(lib) == set(LIBRARY_PARAMS)
    assert all("transferred from" in v["source"] and v["source"].startswith("[I]")
               for v in lib.values())
    assert main(["specs", "--gpu", "v100"]) == 0
    assert "transferred from the h100" in capsys.readouterr().out


def test_one_spec_text_explains_the_evidence_tags(capsys):
    """Every tag the table shows is explained on the legend line, with where sources are."""
    import re

    from gpusim.specs import EVIDENCE

    assert main(["specs", "--gpu", "h100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    legend = next(line for line in lines if line.strip().startswith("evidence:"))
    shown = {m for line in lines for m in re.findall(r"\s\[([A-Z])\]\s", line)}
    assert shown and shown <= set(EVIDENCE), shown
    for tag in shown:
        assert f"[{tag}] {EVIDENCE[tag]}" in legend
    assert any("docs/hardware_sources.md" in line for line in lines[:4])
