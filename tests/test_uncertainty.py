"""gpusim.uncertainty: the contenders of a GPU's previous bands judged on later draws."""

from pathlib import Path

import gpusim


def test_contenders_are_judged_on_the_draws_the_bands_were_not_made_from():
    """``contenders_judged``: the previous bands' contenders on the new draws only (none new:
    None), and ``predict`` quotes the judgement on RNN layers, not on gated ones."""
    import json

    from gpusim.uncertainty import contenders_judged, load_bands
    from measurements.probe import read_record

    root = Path(__file__).resolve().parents[1]
    prev = json.loads((root / "measurements" / "h200" / "error_bands_s111_s116.json").read_text())
    cc = read_record(str(root / "measurements" / "h200" / "crosscheck_fresh.json"))
    assert contenders_judged(prev, prev, cc) is None
    new = [f"fresh_2026-11-30_s{n}" for n in (117, 118)]
    j = contenders_judged(prev, {"draws": ", ".join(new + [prev["draws"]])}, cc)
    assert j["judged_on"] == ", ".join(new) and j["layers"] == 32
    assert 0 <= j["held"] <= 32 and 1 <= j["mean"] <= 7
    b = load_bands()["h200"]["contenders_judged"]
    rnn = gpusim.predict(gpu="h200", hidden=1024, batch=2, density=0.1)
    want = f"held the one the GPU ran fastest in {b['held']} of {b['layers']} RNN layers"
    assert any(want in n for n in rnn.uncertainty.notes)
    lstm = gpusim.predict(gpu="h200", hidden=1024, batch=2, density=0.1, cell="lstm")
    assert not any("held the one the GPU ran fastest" in n for n in lstm.uncertainty.notes)


def test_draw_names_are_shortened_to_their_seeds():
    from gpusim.uncertainty import _seeds, draw_seed

    assert _seeds("fresh_2026-11-30_s117, fresh_2026-11-30_s118, fresh_2026-11-30_s119") == \
        "s117-s119"
    assert _seeds("fresh_2026-11-28_s22, fresh_2026-11-28_s24") == "s22, s24"
    assert _seeds("fresh_2026-11-28_s22") == "s22"
    assert _seeds("my_draw, other") == "my_draw, other"
    assert draw_seed("fresh_2026-11-30_s117") == 117 and draw_seed("mydraw") is None
