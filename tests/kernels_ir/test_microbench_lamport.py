"""The Lamport-exchange mechanism microbenchmarks (``lmech_*``): every family builds, runs in the
executor and in the simulator on a small GPU with its own values check, the check fails on wrong
data, the executor polls each group once per round (lockstep), bad sizes are refused naming the
value, and the recorded simulator predictions are of today's kernels."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.engine import simulate
from gpusim.engine.executor import execute
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.ir import Op, instructions
from kernels_ir.kernels import microbench as mb
from kernels_ir.kernels.microbench import lamport as lm
from kernels_ir.kernels.microbench.lamport_kernel import _owner_rows
from kernels_ir.kernels.microbench.lamport_writers import _layout_words

SPEC = dataclasses.replace(load_spec("h100"), sm_count=8)
PREDICTED = Path(__file__).resolve().parents[2] / "measurements" / "h100" / \
    "lamport_mech_predicted.json"

# small versions of every family (8 SMs, 64-256 threads per CTA)
SMALL = {
    "watch": lambda r: lm.watch(rounds=r, pollers=5, warps=2, threads=64),
    "watch_unit": lambda r: lm.watch(rounds=r, pollers=3, warps=2, where="unit", threads=64),
    "x": lambda r: lm.exchange(rounds=r, words=512, ctas=4, threads=64),
    "xb": lambda r: lm.exchange(rounds=r, words=512, sync="barrier", ctas=4, threads=64),
    "ws_1": lambda r: lm.writers(rounds=r, ws=1, words=256, ctas=8, threads=64),
    "ws_8": lambda r: lm.writers(rounds=r, ws=8, words=256, ctas=8, threads=64),
    "ws_2_warp": lambda r: lm.writers(rounds=r, ws=2, layout="warp", words=256, ctas=8,
                                      threads=64),
    "split_4": lambda r: lm.writers(rounds=r, ws=2, layout="split", gap=4, words=256, ctas=8,
                                    threads=64),
    "delay_4": lambda r: lm.writers(rounds=r, layout="delay", gap=4, words=256, ctas=8,
                                    threads=64),
    "pollers_1": lambda r: lm.writers(rounds=r, pollers=1, words=256, ctas=8, threads=64),
    "slot_ring": lambda r: lm.writers(rounds=r, slots="ring", words=256, ctas=8, threads=64),
    "slot_reset": lambda r: lm.writers(rounds=r, slots="reset", words=256, ctas=8, threads=64),
    "readers": lambda r: lm.readers(rounds=r, ctas=8, writer_ctas=4, words=256, threads=64),
    "xp": lambda r: lm.exchange(rounds=r, words=512, ctas=4, threads=64, present=True),
    "xq": lambda r: lm.exchange(rounds=r, words=512, sync="none", ctas=4, threads=64),
    "x_rot": lambda r: lm.exchange(rounds=r, words=1024, ctas=4, threads=64, rotate=True),
    "xb_rot": lambda r: lm.exchange(rounds=r, words=1024, sync="barrier", ctas=4, threads=64,
                                    rotate=True),
}


def test_every_registered_benchmark_builds_and_checks_in_the_executor():
    assert len(lm.REGISTRY) >= 40
    for name in lm.REGISTRY:
        assert mb.SIZE_ARG[name] == "rounds" and name in mb.MICROBENCHES
        m = mb.build(name, 2)
        assert m.name == name and m.kernel.name == f"mb_{name}" and m.ops == 2
    for name in ("lmech_watch_8_w8", "lmech_x_2048", "lmech_xb_1024", "lmech_ws_4",
                 "lmech_slot_reset", "lmech_pollers_2", "lmech_readers_33"):
        m = mb.build(name, 2)
        assert m.verify_result(execute(m.kernel, m.inputs).globals), name


@pytest.mark.parametrize("key", sorted(SMALL))
def test_small_family_runs_in_the_simulator_with_its_values(key):
    m = SMALL[key](5)
    r = simulate(m.kernel, m.inputs, SPEC)
    assert m.verify_result(r.globals)
    assert r.cycles > 5 * 300          # a round is at least one L2 round trip


@pytest.mark.parametrize("key", sorted(SMALL))
def test_the_check_fails_on_wrong_data(key):
    m = SMALL[key](3)
    g = {k: np.array(v, copy=True) for k, v in execute(m.kernel, m.inputs).globals.items()}
    assert m.verify_result(g)
    out = g["out"]
    out.view(np.int32)[1] += 1         # one thread saw something else
    assert not m.verify_result(g)


def test_the_executor_polls_every_group_once_per_round():
    """Lockstep order: every write precedes the polls that wait for it, so the counter says one
    poll per group and round (the GPU's count above 1 is its re-polls)."""
    from measurements.lamport_mech import poll_stats

    for key in ("ws_1", "pollers_1", "slot_reset", "readers"):
        m = SMALL[key](4)
        st = poll_stats(m, execute(m.kernel, m.inputs).globals["polls"])
        assert st["per_group_round_mean"] == st["max"] == st["min"] == 1.0, key
    m = SMALL["watch"](4)
    st = poll_stats(m, execute(m.kernel, m.inputs).globals["polls"])
    assert st["per_round_ponger"] == st["per_round_watchers_mean"] == 1.0


def test_the_write_layouts_cover_the_slot_once():
    for layout, ws in (("ws", 1), ("ws", 2), ("ws", 4), ("ws", 8), ("warp", 2), ("split", 2)):
        lay = _layout_words(layout, ws, 132, 4096, 8)
        words = lay[lay >= 0]
        assert np.array_equal(np.sort(words), np.arange(4096)), (layout, ws)
        # writers per sector: distinct (CTA, warp, store) per 32-byte sector
        c, w, _, k = np.nonzero(lay >= 0)
        owners = {}
        for ci, wi, ki, word in zip(c, w, k, lay[lay >= 0], strict=True):
            owners.setdefault(word // 8, set()).add((ci, wi, ki))
        assert {len(v) for v in owners.values()} == {ws}, (layout, ws)


def test_the_exchange_stores_like_the_kernel():
    """Owner-ordered rows: warp w writes its rows' words (rows per warp R), every position once."""
    t = _owner_rows(2304, 1056)
    assert t.shape == (1056, 3)
    pos = t[t >= 0]
    assert np.array_equal(np.sort(pos), np.arange(2304))
    assert np.all(np.diff(t[t[:, 2] >= 0][:, :3], axis=1) == 1)   # a warp's rows contiguous
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_layer

    layer = random_layer(2304, 4, 0.01, 2, 0)
    mp = map_matrix(layer.U, n_ctas=132, warps_per_cta=8, batch=4, wide_loads=True,
                    layout="naive")
    kernel_rows = np.where(mp.row_ids >= 0, mp.h_positions[np.maximum(mp.row_ids, 0)], -1)
    assert (kernel_rows >= 0).sum(axis=1).tolist() == (t >= 0).sum(axis=1).tolist()


def test_round_cost_grows_with_the_words_exchanged():
    def per_round(words):
        c = []
        for r in (2, 4):
            m = lm.exchange(rounds=r, words=words, ctas=4, threads=64)
            c.append(simulate(m.kernel, m.inputs, SPEC).cycles)
        return (c[1] - c[0]) / 2

    assert per_round(2048) > per_round(256) > 0


def test_free_running_exchanges_never_wait():
    """``present`` / ``sync="none"``: every slot holds its values before the launch and the
    stores go to their own buffer, so the simulator never replays a poll (its stale rule is
    value-blind), while the Lamport exchange of the same size does replay polls."""
    for words in (512, 1024):
        x, xp, xq = (lm.exchange(rounds=4, words=words, ctas=4, threads=64, **kw)
                     for kw in ({}, {"present": True}, {"sync": "none"}))
        assert xp.name == f"lmech_xp_{words}" and xq.name == f"lmech_xq_{words}"
        assert "sink" in xp.inputs and "sink" in xq.inputs and "sink" not in x.inputs
        ops = {m.name: {i.op for i in instructions(m.kernel)} for m in (xp, xq)}
        assert Op.LDG_VOLATILE in ops[xp.name]                  # polls
        assert Op.LDG_VOLATILE not in ops[xq.name] and Op.LDG in ops[xq.name]   # plain loads
        runs = {m.name: simulate(m.kernel, m.inputs, SPEC) for m in (x, xp, xq)}
        for m in (x, xp, xq):
            assert m.verify_result(runs[m.name].globals), m.name
        assert runs[xp.name].l2_transactions["poll"] == 0
        assert runs[xq.name].l2_transactions["poll"] == 0
        assert runs[x.name].l2_transactions["poll"] > 0      # the exchange itself waits


def test_rotation_changes_the_order_not_the_loads():
    """``rotate``: CTA ``c`` stages its groups from group ``c`` on (4096 words, 64 threads: 4
    groups of 4 chunks). The values staged and the loads issued are the same; the barrier
    exchange is used so that no poll replay blurs the count."""
    kw = {"rounds": 3, "words": 4096, "ctas": 4, "threads": 64, "sync": "barrier"}
    a, b = lm.exchange(**kw), lm.exchange(**kw, rotate=True)
    assert b.name == "lmech_xb_4096_rot" and b.params["rotate"] and not a.params["rotate"]
    ra, rb = simulate(a.kernel, a.inputs, SPEC), simulate(b.kernel, b.inputs, SPEC)
    assert a.verify_result(ra.globals) and b.verify_result(rb.globals)
    assert ra.l2_transactions["data"] == rb.l2_transactions["data"] > 0
    from kernels_ir.printer import format_kernel
    assert "irem" in format_kernel(b.kernel) and "irem" not in format_kernel(a.kernel)


def test_bad_sizes_are_refused_naming_the_value():
    cases = [
        (lambda: lm.exchange(words=1000), "words=1000"),
        (lambda: lm.exchange(sync="fence"), "sync='fence'"),
        (lambda: lm.exchange(sync="barrier", present=True), "present=True"),
        (lambda: lm.exchange(batch=3, words=4096), "batch=3"),
        (lambda: lm.watch(where="near"), "where='near'"),
        (lambda: lm.watch(warps=9), "warps=9"),
        (lambda: lm.watch(pollers=0), "pollers=0"),
        (lambda: lm.writers(words=100), "words=100"),
        (lambda: lm.writers(ws=3), "ws=3"),
        (lambda: lm.writers(layout="rows"), "layout='rows'"),
        (lambda: lm.writers(layout="warp", ws=1), "ws=1"),
        (lambda: lm.writers(gap=4), "gap=4"),
        (lambda: lm.writers(slots="lazy"), "slots='lazy'"),
        (lambda: lm.writers(pollers=9), "pollers=9"),
        (lambda: lm.writers(ws=8, words=8192), "words=8192"),
        (lambda: lm.writers(slots="reset", ctas=40, words=256, threads=64), "reset"),
        (lambda: lm.writers(slots="ring", ring=2), "ring=2"),
        (lambda: lm.readers(words=4000), "words=4000"),
        (lambda: lm.readers(writer_ctas=200, words=51200), "writer_ctas=200"),
        (lambda: mb.build("lmech_ws_1", 0), "rounds=0"),
    ]
    for f, text in cases:
        with pytest.raises(InputError, match=text.replace("(", r"\(")):
            f()


def test_the_script_covers_every_benchmark_and_refuses_unknown_names(capsys):
    from measurements import lamport_mech as script

    assert set(lm.REGISTRY) <= set(script.ENTRIES)
    assert set(script.NCU_NAMES) <= set(script.ENTRIES)
    for fam, gpu, sim in script.ENTRIES.values():
        assert fam in script.FAMILIES and gpu[0] < gpu[1] and (sim[1] - sim[0]) % 2 == 0
    with pytest.raises(SystemExit):
        script.main(["--compile-only", "--only", "lmech_nothing"])
    assert "lmech_nothing" in capsys.readouterr().err


def test_recorded_predictions_are_of_todays_kernels():
    """measurements/h100/lamport_mech_predicted.json: the simulator's values before any GPU
    run, one per benchmark, for exactly the kernels the script builds today."""
    from gpusim.measurements import kernel_fingerprint
    from measurements.lamport_mech import ENTRIES

    rec = json.loads(PREDICTED.read_text())
    res = rec["simulated"]["results"]
    assert set(res) == set(ENTRIES)
    for name, r in res.items():
        assert r["per_op_s"] > 0, name
        if name.startswith("lmech_"):
            size = ENTRIES[name][1][0]
            assert r["kernel"][str(size)] == kernel_fingerprint(mb.build(name, size).kernel)


class _FakeRunner:
    """Stands in for the CuPy runner: "device" buffers are numpy arrays and a launch runs the
    functional executor (so time_bench's device-only path runs here, without a GPU)."""

    cp = type("cp", (), {"asnumpy": staticmethod(np.asarray)})

    def compile(self, kernel):
        from types import SimpleNamespace

        return SimpleNamespace(kernel=kernel, compile_s=0.0, attributes={"num_regs": 0})

    def check_grid(self, comp):
        return comp.kernel.grid

    def device_buffers(self, comp, inputs):
        bufs = {}
        for b in comp.kernel.global_buffers:
            dt = np.float32 if b.dtype.value == "f32" else np.int32
            bufs[b.name] = (np.array(inputs[b.name]).view(dt).copy() if b.name in inputs
                            else np.zeros(b.size, dt))
        return bufs


def _fake_launch(cp, runner, comp, bufs, reset):
    reset(bufs)
    g = execute(comp.kernel, dict(bufs)).globals
    for k, v in g.items():
        bufs[k][...] = np.asarray(v).view(bufs[k].dtype)
    return 1e-5 + 1e-6 * dict(comp.kernel.meta)["rounds"]


def test_time_bench_records_times_polls_and_failures(monkeypatch):
    from gpusim.backends import cupy_backend
    from measurements import lamport_mech as script

    monkeypatch.setattr(cupy_backend, "_time_launch", _fake_launch)
    r = script.time_bench(_FakeRunner(), "lmech_ws_2", (2, 4), repeats=2, warmup=1)
    assert r["status"] == "ok" and r["family"] == "writers"
    assert r["per_op_s"] == pytest.approx(1e-6)
    big = r["sizes"]["4"]
    assert big["t"]["n"] == 2 and len(big["t"]["raw"]) == 2
    assert [p["per_group_round_mean"] for p in big["polls"]] == [1.0, 1.0]
    assert big["kernel"]["cuda_sha256"] and big["params"]["ws"] == 2
    w = script.time_bench(_FakeRunner(), "lmech_watch_8", (2, 4), repeats=1, warmup=0)
    assert w["status"] == "ok" and w["sizes"]["2"]["polls"][0]["per_round_ponger"] == 1.0
    # a wrong value is recorded as an error, not raised
    monkeypatch.setattr(mb.Microbench, "verify_result", lambda self, g: False)
    bad = script.time_bench(_FakeRunner(), "lmech_ws_1", (2, 4), repeats=1, warmup=0)
    assert bad["status"] == "error" and "wrong result" in bad["error"]


def test_measure_writes_one_record_with_both_passes(monkeypatch, tmp_path):
    """The device call's whole path (provenance, clock samples, two passes, the JSON) with the
    GPU parts replaced by the executor."""
    from gpusim.backends import cupy_backend
    from measurements import campaign, probe
    from measurements import lamport_mech as script

    class Clocks:
        def stop(self, prov):
            prov["sm_clock_mhz_samples"] = [1980]

    monkeypatch.setattr(cupy_backend, "_time_launch", _fake_launch)
    monkeypatch.setattr(cupy_backend, "Runner", _FakeRunner)
    monkeypatch.setattr(campaign, "provenance", lambda argv: {"command": " ".join(argv)})
    monkeypatch.setattr(probe, "ClockSampler", Clocks)
    monkeypatch.setitem(script.ENTRIES, "lmech_ws_1", ("writers", (2, 4), (4, 8)))
    res = script.measure(str(tmp_path), ["measurements/lamport_mech.py"], ["lmech_ws_1"], False)
    rec = json.loads((tmp_path / "lamport_mech.json").read_text())
    assert rec == json.loads(json.dumps(res, default=float))
    r = rec["results"]["lmech_ws_1"]
    assert r["status"] == "ok" and r["second_pass"]["status"] == "ok"
    assert r["per_op_s_passes"] == [pytest.approx(1e-6)] * 2
    assert rec["provenance"]["sm_clock_mhz_samples"] == [1980]
    assert "lmech_ws_1" in rec["families"]["writers"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lamport_mech.json"]


def test_simulate_into_adds_the_simulator_next_to_the_measurement(tmp_path):
    from measurements import lamport_mech as script

    path = tmp_path / "rec.json"
    path.write_text(json.dumps({"results": {"lmech_watch_1": {"per_op_s": 600e-9}}}))
    script.main(["--simulate", str(path), "--only", "lmech_watch_1"])
    r = json.loads(path.read_text())["simulated"]["results"]["lmech_watch_1"]
    assert r["measured_per_op_s"] == 600e-9
    assert r["sim_over_measured"] == pytest.approx(r["per_op_s"] / 600e-9)
    assert 400 < r["per_op_cycles"] < 2000 and r["l2_per_op"]["poll"] > 0
