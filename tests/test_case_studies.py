"""docs/case_studies.md quotes what `gpusim predict` says today: a row of each table recomputed."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _case_studies():
    """benchmarks/case_studies.py, the script that writes the page's tables (its row format)."""
    import importlib.util
    import sys

    if "case_studies" not in sys.modules:
        spec = importlib.util.spec_from_file_location("case_studies",
                                                      ROOT / "benchmarks" / "case_studies.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["case_studies"] = mod     # its dataclasses look their module up there
        spec.loader.exec_module(mod)
    return sys.modules["case_studies"]


def test_the_gnmt_row_is_todays_prediction():
    cs = _case_studies()
    case = cs.Case("h100", 1024, 4, 0.1, "lstm")
    assert case in cs.GNMT.cases
    row = cs.gnmt_row(case, case.predict())
    assert row in (ROOT / "docs" / "case_studies.md").read_text()


def test_a_speech_model_row_is_todays_prediction():
    cs = _case_studies()
    case = cs.Case("v100", 1760, 2, 0.1, "rnn", label="RNN 1760")
    assert case in cs.DS2.cases
    row = cs.ds2_row(case, case.predict())
    assert row in (ROOT / "docs" / "case_studies.md").read_text()


def test_a_head_wise_row_is_todays_prediction():
    cs = _case_studies()
    case = cs.Case("h100", 768, 1, 0.5, "lstm", heads=12)
    assert case in cs.SLSTM.cases
    row = cs.slstm_row(case, case.predict())
    assert row in (ROOT / "docs" / "case_studies.md").read_text()
