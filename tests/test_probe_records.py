"""measurements/probe.py's record helpers, with the GPU pieces stood in for (the runner, the
provenance, the clock sampler): every layer or benchmark is recorded, a failing one as an error
while the others still run, and the file holds the metadata."""

from __future__ import annotations

import json

import pytest

import gpusim.backends.cupy_backend as cb
import measurements.campaign as campaign
from measurements import probe


class _Clocks:
    def stop(self, prov):
        prov["sm_clock_mhz_samples"] = [1980]


def _stand_ins(monkeypatch):
    monkeypatch.setattr(cb, "Runner", lambda: "runner")
    monkeypatch.setattr(campaign, "provenance", lambda argv: {"command": " ".join(argv)})
    monkeypatch.setattr(probe, "ClockSampler", _Clocks)


def test_record_layers_records_every_layer_and_an_error(monkeypatch, tmp_path, capsys):
    _stand_ins(monkeypatch)

    def run(runner, spec, h, b, d):
        assert runner == "runner" and spec.name == "h100"
        if h == 2:
            raise ValueError("no")
        return {"per_step_s": h * 1e-6}
    shown = []
    rec = probe.record_layers(str(tmp_path), ["probe.py"], "r.json", [(1, 2, 0.1), (2, 1, 0.5)],
                              run, lambda key, r: shown.append(key), steps=[8, 2])
    on_disk = json.loads((tmp_path / "r.json").read_text())
    assert on_disk == rec and rec["steps"] == [8, 2] and shown == ["h1-b2-d0.1"]
    assert rec["provenance"] == {"command": "probe.py", "sm_clock_mhz_samples": [1980]}
    ok, bad = rec["results"]["h1-b2-d0.1"], rec["results"]["h2-b1-d0.5"]
    assert ok == {"hidden": 1, "batch": 2, "density": 0.1, "per_step_s": 1e-6, "status": "ok"}
    assert bad["status"] == "error" and bad["error"] == "ValueError: no"
    assert "h2-b1-d0.5: FAILED ValueError: no" in capsys.readouterr().out


def test_record_microbenches_names_the_benchmark(monkeypatch, tmp_path):
    _stand_ins(monkeypatch)
    calls = []

    def timed(runner, name, sizes, kw, **opts):
        calls.append((name, sizes, kw, opts["repeats"], opts["label"]))
        return {"status": "ok" if name == "a" else "error", "per_op_s": 1.0}
    monkeypatch.setattr(probe, "time_microbench", timed)
    rec = probe.record_microbenches(str(tmp_path), ["x"], "m.json",
                                    [("k1", "a", (2, 4), {"n": 1}), ("k2", "b", (1, 2), {})])
    assert calls == [("a", (2, 4), {"n": 1}, 11, "k1"), ("b", (1, 2), {}, 11, "k2")]
    assert rec["results"]["k1"]["benchmark"] == "a" and "benchmark" not in rec["results"]["k2"]
    assert json.loads((tmp_path / "m.json").read_text())["format_version"] == 2


def test_simulate_microbenches_adds_the_simulated_slope_next_to_the_measured(tmp_path):
    """The simulator's cost per link of a dependent FFMA chain is the spec's FMA latency; the
    measured value and the builder arguments travel with it, the rest of the record stays."""
    from gpusim.specs import load_spec

    spec = load_spec("h100")
    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"provenance": {"command": "x"},
                                "results": {"ffma": {"status": "ok", "per_op_s": 2e-9}}}))
    probe.simulate_microbenches(str(path), [("ffma", "ffma_latency", (2, 4), {}),
                                            ("bar", "bar_latency", (2, 4), {"warps": 4})])
    rec = json.loads(path.read_text())
    assert rec["provenance"] == {"command": "x"}
    sim = rec["simulated"]
    assert sim["spec"] == "h100" and sim["clock_hz"] == spec.clock_hz
    assert sim["results"]["ffma"]["per_op_cycles"] == spec.fma_latency_cycles
    assert sim["results"]["ffma"]["measured_per_op_s"] == 2e-9
    assert sim["results"]["ffma"]["sizes"] == [2, 4] and "arguments" not in sim["results"]["ffma"]
    assert sim["results"]["bar"]["measured_per_op_s"] is None
    assert sim["results"]["bar"]["arguments"] == {"warps": 4}


def test_record_rounds_keeps_every_pass_and_their_mean(monkeypatch, tmp_path):
    _stand_ins(monkeypatch)
    times = iter([1e-6, 2e-6, 3e-6, 5e-6])     # pass 0: a, b; pass 1: a, b

    def fake(sizes, build, **kw):
        assert kw["runner"] == "runner" and build(sizes[0]) == ("built", sizes[0])
        return {"name": "m", "per_op_s": next(times)}
    monkeypatch.setattr(cb, "run_microbench", fake)
    items = [(k, lambda s: ("built", s)) for k in ("a", "b")]
    rec = probe.record_rounds(str(tmp_path), ["p.py"], "r.json", items, passes=2)
    assert rec["passes_s"] == {"a": [1e-6, 3e-6], "b": [2e-6, 5e-6]}
    assert rec["results"]["a"]["per_op_s"] == pytest.approx(2e-6)
    assert rec["results"]["b"]["per_op_s"] == pytest.approx(3.5e-6)
    assert json.loads((tmp_path / "r.json").read_text()) == rec
    times = iter([7e-6])
    rec1 = probe.record_rounds(str(tmp_path), ["p.py"], "s.json", items[:1])
    assert "passes_s" not in rec1 and rec1["results"]["a"]["per_op_s"] == 7e-6


@pytest.mark.parametrize("ext", ["", ".gz", ".xz"])
def test_a_record_is_read_back_by_its_plain_name_whatever_its_compression(tmp_path, ext):
    """``save_record`` writes plain, gzip or xz by the name's ending; ``read_record`` finds the
    compressed copy by the plain name, and a later save goes to the copy that exists (the merged
    records are kept as ``crosscheck_fresh.json.xz`` or ``.gz``)."""
    import gzip
    import lzma

    rec = {"a": [1, 2.5], "b": {"c": "d"}}
    probe.save_record(str(tmp_path / f"r.json{ext}"), rec)
    raw = (tmp_path / f"r.json{ext}").read_bytes()
    assert {"": lambda b: b, ".gz": gzip.decompress, ".xz": lzma.decompress}[ext](raw)
    assert probe.read_record(str(tmp_path / "r.json")) == rec
    probe.save_record(str(tmp_path / "r.json"), {"e": 1})
    assert probe.read_record(str(tmp_path / f"r.json{ext}")) == {"e": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"r.json{ext}"]
