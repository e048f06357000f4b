"""measurements/bank_rule.py --analyse: on synthetic records whose Nsight values follow a known
rule, the analysis names that rule (and only rules that agree on every pattern); its reference
rule equals kernels_ir.banks; kernels_ir.banks reproduces every usable pattern of the H100
record; bad files are refused by name."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kernels_ir import banks
from kernels_ir.errors import InputError
from kernels_ir.kernels import bank_probe as bp
from measurements import bank_rule as br
from measurements.probe import read_record

RECORD = Path(__file__).resolve().parents[1] / "measurements" / "h100" / "bank_rule.json"


@pytest.fixture(scope="module")
def pats():
    return bp.catalogue(kernels=False)


def _record(pats, wf_rule: str | None = None, ideal_rule: str | None = None, *,
            split: str | None = None) -> dict:
    """A record as the GPU run writes it, its counters made by the given rules (None:
    ``br.MODEL``, the rules of kernels_ir.banks per op; ``split``: this pattern's instruction
    executed twice, as a compiler split would show)."""
    recs = []
    for p in pats:
        d = p.to_dict()
        d["repeats"] = p.repeats
        d["values_ok"] = True
        pr = br.predict(d)
        rw, ri = br.MODEL[p.op] if wf_rule is None else (wf_rule, ideal_rule)
        wf, ideal = pr["wf"][rw], pr["ideal"][ri]
        r = p.repeats
        wk, ck, ik, bk = br.OP_METRICS[p.op]
        d["ncu"] = {wk: float(wf * r), ck: float((wf - ideal) * r),
                    ik: float(r * (2 if p.name == split else 1)), bk: float(32 * r),
                    "l1tex__data_bank_conflicts_type_arbitration.sum": 0.0}
        recs.append(d)
    return {"format_version": br.FORMAT_VERSION, "patterns": recs}


def _subset(pats):
    keep = ("contig", "broadcast", "same_bank", "stride2", "stride17", "pairs_xor1",
            "pairs_xor8", "perm_transpose", "conflict0_8", "contig_evens", "contig_quarter1",
            "same_bank_l0_8_16_24", "random0", "random1", "random3", "contig_noise_ldg")
    return [p for p in pats if p.name.split("_", 1)[1] in keep]


def test_reference_rules_are_kernels_ir_banks(pats):
    for p in pats:
        w, a = p.words_array, p.active_array
        rw, ri = br.MODEL[p.op]
        wf, ideal = br.WAVEFRONT_RULES[rw](w, a, p.width), br.IDEAL_RULES[ri](w, a, p.width)
        assert banks.cost(w, p.width, a, p.op) == (wf, wf - ideal), p.name
        assert br.wf_lane_phase(w, a, p.width) == banks.wavefronts(w, p.width, a, "st"), p.name
        assert br.ideal_active_phases(w, a, p.width) == banks.active_phases(
            p.width, a, ()), p.name


def test_kernels_ir_banks_reproduces_the_h100_record():
    """Every usable pattern of the recorded sweep: wavefronts and Nsight's conflict counter per
    instruction equal kernels_ir.banks (the list of exceptions is pinned: it may only shrink)."""
    record = read_record(str(RECORD))       # kept gzipped
    a = br.analyse(record)
    assert len(a["usable"]) == 344 and not a["excluded"]
    assert br.banks_misses(a) == list(br.KNOWN_EXCEPTIONS)
    for (op, width), g in a["groups"].items():
        assert g["banks_wf"] == g["banks_conflicts"] == g["n"], (op, width)
        assert br.MODEL[op] in g["conflicts_all"], (op, width)
    # the record needs return packing: lane phases alone miss loads of 64 and 128 bits
    lane = [p["name"] for p, m, pr in a["usable"]
            if pr["wf"]["lane_phase"] != m["wavefronts"]
            or pr["wf"]["lane_phase"] - pr["ideal"]["active_phases"] != m["conflicts"]]
    assert len(lane) == 19 and all(n.startswith(("ld64", "ld128")) for n in lane)
    assert {"ld128_contig_evens", "ld128_h1024b4d0.1_optimal_w627s4", "ld64_contig_evens",
            "ld128_broadcast", "ld128_pairs_xor2"} <= set(lane)


def test_the_analysis_finds_the_rule_that_made_the_record(pats, capsys):
    sub = _subset(pats)
    assert len(sub) > 60
    a = br.analyse(_record(sub))
    assert a["excluded"] == [] and len(a["noise"]) == 4
    assert set(a["groups"]) == {(op, w) for op in bp.OPS for w in (1, 2, 4)}
    for (op, _), g in a["groups"].items():
        assert br.MODEL[op] in g["conflicts_all"]
        assert br.MODEL[op][0] in g["wf_all"] and br.MODEL[op][1] in g["ideal_all"]
        assert g["banks_wf"] == g["banks_conflicts"] == g["n"]
    # 128-bit: quarter-warp phases and the whole warp disagree, so only the model's rule is left
    g = a["groups"][("ld", 4)]
    assert "warp" not in g["wf_all"] and ("warp", "width") not in g["conflicts_all"]
    # packed loads (pairs_xor1, contig_evens) tell return packing from lane phases
    assert "lane_phase" not in g["wf_all"] and ("lane_phase", "active_phases") not in g[
        "conflicts_all"]
    # stores are not packed
    assert "return_packed" not in a["groups"][("st", 4)]["wf_all"]
    # a record made by another rule: the analysis names it, and not kernels_ir.banks
    b = br.analyse(_record(sub, "warp", "data"))
    for key in (("ld", 4), ("st", 4), ("ld", 2)):
        g = b["groups"][key]
        assert ("warp", "data") in g["conflicts_all"], key
        assert br.MODEL[key[0]] not in g["conflicts_all"], key
        assert "warp" in g["wf_all"] and br.MODEL[key[0]][0] not in g["wf_all"], key
        assert g["banks_wf"] < g["n"]
    br.report(_record(sub, "in_order", "width"))
    out = capsys.readouterr().out
    assert "conflict counter matched by EVERY pattern: in_order - width" in out
    assert "kernels_ir.banks: conflicts match" in out
    assert "patterns kernels_ir.banks does not match: ld" in out


def test_a_split_instruction_is_excluded_not_matched(pats):
    sub = _subset(pats)
    a = br.analyse(_record(sub, split="ld128_contig"))
    assert [(p["name"], why) for p, _, why in a["excluded"]] == [
        ("ld128_contig", "instructions per access 2")]


def test_analyse_command_line_and_bad_files(tmp_path, pats, capsys):
    path = tmp_path / "bank_rule.json"
    path.write_text(json.dumps(_record(_subset(pats))))
    assert br.main(["--analyse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "return_packed - packed_phases" in out and "noise runs" in out
    assert "patterns kernels_ir.banks does not match: none" in out
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InputError, match="bad.json: cannot read"):
        br.main(["--analyse", str(bad)])
    bad.write_text(json.dumps({"cases": []}))
    with pytest.raises(InputError, match="no 'patterns' list"):
        br.main(["--analyse", str(bad)])


def test_candidate_rules_on_hand_made_accesses():
    lanes = np.arange(32)
    on = np.ones(32, bool)
    t = ((lanes % 8) * 4 + lanes // 8) * 4        # 128-bit, each quarter in 2 bank groups
    assert br.wf_lane_phase(t, on, 4) == 16 and br.wf_warp(t, on, 4) == 4
    assert br.wf_half_warp(t, on, 4) == 8 and br.wf_addr_phase(t, on, 4) == 4
    pair = (lanes // 2) * 4                       # lanes 2k, 2k+1 share 16 bytes
    assert br.wf_lane_phase(pair, on, 4) == 4 and br.wf_pair_pack(pair, on, 4) == 2
    assert br.ideal_data(pair, on, 4) == 2 and br.ideal_lanes(pair, on, 4) == 4
    assert br.wf_return_packed(pair, on, 4) == 2 and br.ideal_packed_phases(pair, on, 4) == 2
    evens = lanes % 2 == 0                        # every second lane, contiguous 16-byte chunks
    assert br.wf_return_packed(lanes * 4, evens, 4) == 4
    assert br.ideal_packed_phases(lanes * 4, evens, 4) == 2
    xor4 = (lanes & ~4) * 4                       # lanes l, l^4 share: not packed
    assert br.wf_return_packed(xor4, on, 4) == 4 and br.ideal_packed_phases(xor4, on, 4) == 4
    # in lane order, a lane that returns to a bank already used cuts the wavefront
    x = np.zeros(32, np.int64)
    x[1], x[2] = 32, 0                            # words 0, 32, 0 in bank 0, rest word 0
    assert br.wf_lane_phase(x, on, 1) == 2 and br.wf_in_order(x, on, 1) == 3


# ------------------------------------------------------------------ the device side, faked
# No GPU here: a runner that executes the probes in the functional executor, and an ``ncu``
# that runs the worker in-process and writes the raw CSV Nsight would, with the model's counts.


class _FakeRunner:
    def __init__(self):
        from types import SimpleNamespace

        dev = SimpleNamespace(synchronize=lambda: None)
        self.cp = SimpleNamespace(cuda=SimpleNamespace(Device=lambda: dev), asnumpy=np.asarray)

    def compile(self, kernel):
        return kernel

    def device_buffers(self, kernel, inputs):
        bufs = {b.name: np.zeros(b.size, np.int32) for b in kernel.global_buffers}
        bufs.update({k: np.array(v) for k, v in inputs.items()})
        return bufs

    def launch(self, kernel, bufs):
        from gpusim.engine.executor import execute

        bufs.update(execute(kernel, {b.name: bufs[b.name]
                                     for b in kernel.global_buffers}).globals)

    def check_err(self, kernel, bufs):
        pass


def _fake_ncu(monkeypatch, calls):
    import argparse
    import subprocess
    from types import SimpleNamespace

    def run(cmd, **kw):
        calls.append(cmd)
        if cmd[0] != "ncu" or "--worker" not in cmd:
            raise OSError("no such tool here")
        i = cmd.index("--worker")
        args = argparse.Namespace(
            patterns=cmd[i + 2], order=cmd[i + 4], start=int(cmd[i + 6]), stop=int(cmd[i + 8]))
        br.worker(args)
        metrics = cmd[cmd.index("--metrics") + 1].split(",")
        pats = {p.name: p for p in br._patterns_from(args.patterns)}
        with open(args.order) as f:
            names = [name for name, launched in json.load(f) if launched]
        rows = [["ID", "Kernel Name", *metrics], ["", "", *([""] * len(metrics))]]
        for n, name in enumerate(names):
            p = pats[name]
            d = {**p.to_dict(), "repeats": p.repeats}
            pr = br.predict(d)
            rw, ri = br.MODEL[p.op]
            wf, ideal = pr["wf"][rw], pr["ideal"][ri]
            vals = dict.fromkeys(metrics, 0)
            wk, ck, ik, _ = br.OP_METRICS[p.op]
            vals.update({wk: wf * p.repeats, ck: (wf - ideal) * p.repeats, ik: p.repeats})
            rows.append([str(n), "bank_probe", *(f"{vals[m]:,}" for m in metrics)])
        log = cmd[cmd.index("--log-file") + 1]
        with open(log, "w") as f:
            f.write("==PROF== Disconnected from process 1\n")
            f.write("\n".join(",".join(f'"{x}"' for x in r) for r in rows) + "\n")
        return SimpleNamespace(returncode=0, stderr="", stdout="")

    monkeypatch.setattr(subprocess, "run", run)


def test_device_run_end_to_end_with_fakes(tmp_path, monkeypatch, capsys, pats):
    import gpusim.backends.cupy_backend as cb
    import measurements.campaign as camp

    monkeypatch.setattr(cb, "Runner", _FakeRunner)
    monkeypatch.setattr(camp, "provenance", lambda argv: {"gpu_name": "fake", "argv": argv})
    monkeypatch.setattr(bp, "catalogue", lambda: pats)
    monkeypatch.setattr(br, "sass_pass", lambda out: {"ok": True})
    calls = []
    _fake_ncu(monkeypatch, calls)
    res = br.measure(str(tmp_path), ["measurements/bank_rule.py", "--out", "x"], budget_s=600,
                     chunk=6, limit=14)
    files = sorted(x.name for x in tmp_path.iterdir())
    assert files == ["bank_rule.json", "bank_rule_ncu_raw.csv"]   # temp files removed
    rec = json.loads((tmp_path / "bank_rule.json").read_text())
    assert len(rec["patterns"]) == 14 and rec["provenance"]["gpu_name"] == "fake"
    assert all(p["values_ok"] for p in rec["patterns"])
    hw = [r for r in rec["ncu_runs"] if r["pass"] == "hardware"]
    assert [(r["start"], r["stop"], r["launches"]) for r in hw] == [(0, 6, 6), (6, 12, 6),
                                                                     (12, 14, 2)]
    assert all("ncu" in p and "ncu_sass" in p for p in rec["patterns"])
    a = br.analyse(rec)
    assert len(a["usable"]) + len(a["noise"]) == 14 and not a["excluded"]
    assert len(a["noise"]) == 6 and {p["family"] for p, _, _ in a["usable"]} == {"kernel"}
    assert "kernels_ir.banks: conflicts match" in capsys.readouterr().out
    assert res["seconds"] > 0
    # a budget too small for any Nsight chunk: every chunk is skipped and says why
    out2 = tmp_path / "small"
    out2.mkdir()
    res = br.measure(str(out2), ["x"], budget_s=1, chunk=6, limit=4)
    assert all("time budget" in r["skipped"] for r in res["ncu_runs"])
    assert not any("ncu" in p for p in res["patterns"])

