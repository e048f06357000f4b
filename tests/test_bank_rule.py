"""measurements/bank_rule.py --analyse: on synthetic records whose Nsight values follow a known
rule, the analysis names that rule (and only rules that agree on every pattern); its reference
rule equals kernels_ir.banks; bad files are refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernels_ir import banks
from kernels_ir.errors import InputError
from kernels_ir.kernels import bank_probe as bp
from measurements import bank_rule as br


@pytest.fixture(scope="module")
def pats():
    return bp.catalogue(kernels=False)


def _record(pats, wf_rule: str, ideal_rule: str, *, split: str | None = None) -> dict:
    """A record as the GPU run writes it, its counters made by the given rules (``split``:
    this pattern's instruction executed twice, as a compiler split would show)."""
    recs = []
    for p in pats:
        d = p.to_dict()
        d["repeats"] = p.repeats
        d["values_ok"] = True
        pr = br.predict(d)
        wf, ideal = pr["wf"][wf_rule], pr["ideal"][ideal_rule]
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
        assert br.wf_lane_phase(w, a, p.width) == banks.wavefronts(w, p.width, a), p.name
        assert br.ideal_active_phases(w, a, p.width) == banks.active_phases(
            p.width, a, ()), p.name


def test_the_analysis_finds_the_rule_that_made_the_record(pats, capsys):
    sub = _subset(pats)
    assert len(sub) > 60
    a = br.analyse(_record(sub, *br.MODEL))
    assert a["excluded"] == [] and len(a["noise"]) == 4
    assert set(a["groups"]) == {(op, w) for op in bp.OPS for w in (1, 2, 4)}
    for g in a["groups"].values():
        assert br.MODEL in g["conflicts_all"]
        assert "lane_phase" in g["wf_all"] and "active_phases" in g["ideal_all"]
    # 128-bit: quarter-warp phases and the whole warp disagree, so only the model's rule is left
    g = a["groups"][("ld", 4)]
    assert "warp" not in g["wf_all"] and ("warp", "width") not in g["conflicts_all"]
    # a record made by another rule: the analysis names it, and not kernels_ir.banks
    b = br.analyse(_record(sub, "warp", "data"))
    for key in (("ld", 4), ("st", 4), ("ld", 2)):
        g = b["groups"][key]
        assert ("warp", "data") in g["conflicts_all"], key
        assert br.MODEL not in g["conflicts_all"], key
        assert "warp" in g["wf_all"] and "lane_phase" not in g["wf_all"], key
    br.report(_record(sub, "in_order", "width"))
    out = capsys.readouterr().out
    assert "conflict counter matched by EVERY pattern: in_order - width" in out
    assert "kernels_ir.banks: conflicts match" in out


def test_a_split_instruction_is_excluded_not_matched(pats):
    sub = _subset(pats)
    a = br.analyse(_record(sub, *br.MODEL, split="ld128_contig"))
    assert [(p["name"], why) for p, _, why in a["excluded"]] == [
        ("ld128_contig", "instructions per access 2")]


def test_analyse_command_line_and_bad_files(tmp_path, pats, capsys):
    path = tmp_path / "bank_rule.json"
    path.write_text(json.dumps(_record(_subset(pats), *br.MODEL)))
    assert br.main(["--analyse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "lane_phase - active_phases" in out and "noise runs" in out
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
            wf, ideal = pr["wf"]["lane_phase"], pr["ideal"]["active_phases"]
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

