"""measurements/lamport_wait.py, lamport_trace.py and l2_jitter.py: the back-off rewrite puts a
live FFMA chain under the failed-poll branch and leaves the values alone; the stamped CUDA has
every stamp once and refuses code of another shape; the records hold what the README's tables
and claims say."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.specs import load_spec
from kernels_ir.codegen_cuda import generate
from kernels_ir.ir import If, Instr, Op, While, walk
from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE, max_rel_err
from measurements import l2_jitter, lamport_trace, lamport_wait

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "measurements" / "h100"
README = (ROOT / "measurements" / "README.md").read_text()
SECTION = README[README.index("## Inside the Lamport kernel's step"):]
SECTION = SECTION[:SECTION.index("\n## ")]


def _spec():
    return dataclasses.replace(load_spec("h100"), sm_count=4)


def _poll_loop(kernel):
    return next(n for n in walk(kernel.body) if isinstance(n, While) and n.label == "lamport_poll")


def test_backoff_chain_sits_under_the_failed_poll_and_feeds_the_exit():
    spec = _spec()
    prog = lamport_wait.build(64, 2, 0.2, 3, spec, n_backoff=8)
    loop = _poll_loop(prog.kernel)
    tail = loop.body[-1]
    assert isinstance(tail, If) and tail.cond == loop.cond
    ops = [i.op for i in tail.then if isinstance(i, Instr)]
    assert ops.count(Op.FFMA) == 8 and ops[0] is Op.FADD and ops[-1] is Op.PAND
    first = tail.then[0]
    polled = [i for i in loop.body if isinstance(i, Instr) and i.op is Op.LDG_VOLATILE] + [
        i for n in loop.body if isinstance(n, If) for i in n.then
        if isinstance(i, Instr) and i.op is Op.LDG_VOLATILE]
    assert first.srcs[0] == polled[0].dsts[0]          # started from a polled word
    code = generate(prog.kernel).code
    assert code.count("__fmaf_rn(r_bo_f0, 0.5f, 0.25f)") == 8
    r = simulate(prog.kernel, prog.inputs, spec)
    assert max_rel_err(prog.outputs(r.globals), prog.reference()) <= VALUE_TOLERANCE
    plain = lamport_wait.build(64, 2, 0.2, 3, spec)
    assert not any(isinstance(n, If) and n.cond == _poll_loop(plain.kernel).cond
                   for n in _poll_loop(plain.kernel).body)


def test_stamped_code_has_every_stamp_once_and_refuses_another_shape():
    spec = _spec()
    prog = lamport_trace.build(64, 2, 0.2, 8, spec)
    code = generate(lamport_trace._with_ts(prog.kernel, 8)).code
    out = lamport_trace.instrumented_code(code, 8)
    for k in range(len(lamport_trace.FIELDS)):
        assert len(re.findall(rf"g_ts\[ts_i \+ {k}\]", out)) == 1, k
    rows = lamport_trace.instrumented_code(code, 8, rows=True)
    assert "g_ts[ts_i + 7]" in rows and "g_ts[ts_i + 8]" in rows
    with pytest.raises(AssertionError, match="time loop"):
        lamport_trace.instrumented_code(code, 9)
    with pytest.raises(AssertionError, match="poll exit"):
        lamport_trace.instrumented_code(code.replace("if (!r_warp_waiting) break;", ""), 8)


def test_summary_reads_synthetic_stamps():
    ns_per_cycle = 0.5
    steps, ctas, warps = 20, 3, 2
    ts = np.zeros((steps, ctas, warps, len(lamport_trace.FIELDS)), np.int64)
    for t in range(steps):
        base = 1000 * t
        ts[t, ..., 0] = base
        ts[t, ..., 6] = base + 20
        ts[t, ..., 1] = base + 320
        ts[t, ..., 2] = 2
        ts[t, ..., 3] = base + 360
        ts[t, ..., 4] = base + 860
        ts[t, ..., 5] = base // 2          # global timer in ns at 2 GHz
    s = lamport_trace.summarise(ts, 1e9 / ns_per_cycle)
    assert s["poll_ns"] == 160 and s["first_poll_ns"] == 150 and s["compute_ns"] == 250
    assert s["staging_wait_ns"] == 20 and s["step_ns"] == 500 and s["polls_per_warp_step"] == 2
    assert s["store_spread_ns"] == pytest.approx(0, abs=1e-6)


def test_wait_record_and_its_table():
    rec = json.loads((H100 / "lamport_wait.json").read_text())
    assert "lamport_wait.py" in rec["provenance"]["command"]
    assert rec["variants"] == list(lamport_wait.VARIANTS)
    for key, r in rec["results"].items():
        assert r["status"] == "ok"
        row = " | ".join(str(round(r[v]["per_step_s"] * 1e9)) for v in lamport_wait.VARIANTS)
        assert f"| {key} | {row} |" in SECTION, key
        assert r["inplace"]["per_step_s"] <= r["prefilled"]["per_step_s"] * 1.01
        grow = r["backoff_512"]["per_step_s"] - r["normal"]["per_step_s"]
        assert 350e-9 < grow < 1050e-9, key
        sim = rec["simulated"]["results"][key]
        assert sim["inplace"] == sim["normal"]        # the simulator's limit, stated


def test_trace_record_and_its_claims():
    rec = json.loads((H100 / "lamport_trace.json").read_text())
    assert "lamport_trace.py" in rec["provenance"]["command"]
    assert rec["fields"] == list(lamport_trace.FIELDS)
    sim = rec["simulated"]["results"]
    assert set(sim) == {"h2824-b1-d0.0211", "h1336-b2-d0.0234", "h944-b4-d0.0198"}
    for key, s in sim.items():
        g = rec["results"][key]
        for mode, sm in (("normal", "normal"), ("inplace", "prefilled")):
            gs = g[mode]["summary"]
            layer = key.split("-d")[0]
            label = f"{layer}, {'normal' if mode == 'normal' else 'no wait'}"
            line = next(x for x in SECTION.splitlines() if x.startswith(f"| {label} |"))
            want = [round(gs["poll_ns"]), round(s[sm]["poll_ns"]), round(gs["staging_wait_ns"]),
                    round(s[sm]["staging_wait_ns"]), round(gs["compute_ns"]),
                    round(s[sm]["compute_ns"])]
            got = [int(x) for x in re.findall(r"\d+", line.split("|")[2] + line.split("|")[3]
                                              + line.split("|")[4])]
            assert got == want, (key, mode)
            assert s[sm][f"gpu_{mode}"]["slowest_warp_ns"] > s[sm]["slowest_warp_ns"] + 80
        assert g["normal"]["summary"]["staging_wait_ns"] > 3 * s["normal"]["staging_wait_ns"]


def test_jitter_record_round_trips_do_not_jitter():
    rec = json.loads((H100 / "l2_jitter.json").read_text())
    assert "l2_jitter.py" in rec["provenance"]["command"]
    assert set(rec["configs"]) == set(l2_jitter.CONFIGS)
    for name, c in rec["configs"].items():
        assert c["within_line_std_cycles"] < 3 < 15 < c["per_line_mean_std_cycles"] < 20, name
        p = c["percentiles_cycles"]
        assert 255 < p["1"] and p["99"] < 340, name
        assert f"{p['1']:.0f} / {p['50']:.0f} / {p['99']:.0f}" in SECTION, name


def test_rows_record_and_its_claims():
    rec = json.loads((H100 / "lamport_trace_rows.json").read_text())
    assert rec["fields"] == list(lamport_trace.ROW_FIELDS) and "--rows" in rec["note"]
    plain = json.loads((H100 / "lamport_trace.json").read_text())["results"]
    light = ("h2824-b1-d0.0211", "h1336-b2-d0.0234", "h944-b4-d0.0198")
    red = [round(rec["results"][k]["normal"]["summary"]["first_row_reduced_ns"]) for k in light]
    tanh = [round(rec["results"][k]["normal"]["summary"]["first_row_tanh_ns"]) for k in light]
    assert f"ready {min(red)}-{max(red)} ns" in SECTION.replace("\n  ", " ")
    assert f"takes {min(tanh)}-{max(tanh)} ns inside the kernel" in SECTION.replace("\n  ", " ")
    grow = [rec["results"][k]["normal"]["summary"]["compute_ns"]
            - plain[k]["normal"]["summary"]["compute_ns"] for k in rec["results"]]
    assert 55 < min(grow) and max(grow) < 150    # "lengthen the mat-vec by 60-145 ns"
