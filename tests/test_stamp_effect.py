"""The dense kernel at batch 1 and what the clock stamps do to the Lamport kernels
(``measurements/h200``: ``body_probe_dense.json``, ``exchange_groups_dense.json``,
``dense_steps.json``, ``stamp_effect*.json``, ``step_fence.json``, ``store_flush*.json``,
``alloc_spread.json``): the records are complete and checked, measurements/README.md's tables are
the records and its claims hold on them, and the kernels' step fence is an option that is off."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from measurements import body_probe, dense_steps, stamp_effect, step_fence, store_flush
from measurements import exchange_groups as eg
from measurements.probe import read_record

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "measurements" / "h200"
README = (ROOT / "measurements" / "README.md").read_text()


def _load(name):
    return read_record(str(H200 / name))


def _ns(x):
    return x * 1e9


def _h200(rec):
    assert "H200" in rec["provenance"]["gpu_name"]
    assert rec["provenance"]["command"].startswith("python3 measurements/")


def test_the_dense_body_alone_agrees_with_the_simulator():
    rec = _load("body_probe_dense.json")
    _h200(rec)
    assert set(rec["results"]) == {k for k, _ in body_probe.DENSE_ENTRIES}
    sim = rec["simulated"]["results"]
    for key, r in rec["results"].items():
        assert r["status"] == "ok", key
        ratio = sim[key]["per_op_s"] / r["per_op_s"]
        assert 0.93 < ratio < 1.04, (key, ratio)      # the README: within -7% to +3%


def test_the_stamped_launches_agree_with_their_stamps_and_the_simulator_with_them():
    """dense_steps.json: launch time less the campaign's intercept, over the steps, is the stamped
    mean within 5% but for dense h536-b1 (its campaign's intercept an outlier); the simulator is
    within -3% to +9% of the stamped mean from hidden 928 up, 13-24% under the campaign's slope
    for the dense kernel at batch 1."""
    import statistics

    rec = _load("dense_steps.json")
    sim = rec["simulated"]["results"]
    off = []
    for key, r in rec["results"].items():
        for kind in dense_steps.KERNELS:
            c, s = r[kind]["campaign"], r[kind]["stamped"]
            mean = s["summary"]["step_mean_ns"]
            est = _ns(statistics.median(s["launch_s"]) - c["launch_s"]) / dense_steps.STEPS
            if abs(est / mean - 1) >= 0.05:
                off.append((key, kind))
            ratio = _ns(sim[key][kind]["per_step_s"]) / mean
            if r["hidden"] >= 928:
                assert 0.97 < ratio < 1.095, (key, kind, ratio)
            if kind == "dense" and r["batch"] == 1:
                fast = 1 - _ns(sim[key][kind]["per_step_s"]) / _ns(c["per_step_s"])
                assert 0.13 < fast < 0.245, (key, fast)
    assert off == [("h536-b1-d0.05", "dense")]


def test_the_short_launch_keeps_the_programs_options():
    """The runner's T' launch is built with the staging and step options of the program it
    shortens (else the campaign's slope would compare two kernels)."""
    from gpusim.backends.cupy_backend import _short_program
    from gpusim.specs import load_spec
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    spec = _small(load_spec("h200"))
    layer = make_layer(1100, 4, 0.05, 6, seed=1)          # two staging groups, a partial one
    for prog in (build_sparse_rnn(layer, spec, layout="optimal", step_fence=True,
                                  stage_fallback="chunk0"),
                 build_dense_rnn(make_layer(256, 1, 0.1, 6, seed=1), spec, step_fence=True)):
        short = _short_program(prog, 2, spec)
        assert short.variant == prog.variant and prog.variant["step_fence"] is True
        code, short_code = generate(prog.kernel).code, generate(short.kernel).code
        assert code.count("__threadfence") == short_code.count("__threadfence")
    assert "stage_fallback" not in build_sparse_rnn(layer, spec).variant


def test_the_dense_kernel_stamped_agrees_with_the_simulator():
    rec = _load("exchange_groups_dense.json")
    _h200(rec)
    assert rec["dense"] is True
    assert [(r["hidden"], r["batch"], r["density"]) for r in rec["results"].values()] == \
        list(eg.DENSE_LAYERS)
    sim = rec["simulated"]["results"]
    for key, r in rec["results"].items():
        assert r["status"] == "ok", key
        for run in ("lamport_plain", "lamport_stamped", "barrier_plain", "barrier_stamped"):
            assert r[run]["max_rel_err"] < 1e-3, (key, run)
        ratio = sim[key]["lamport"]["step_ns"] / r["lamport_stamped"]["summary"]["step_ns"]
        assert 0.89 < ratio < 1.09, (key, ratio)      # the README: within -10% to +8%


def test_the_campaigns_kernel_is_slower_than_the_stamped_one_at_batch_1():
    rec = _load("dense_steps.json")
    _h200(rec)
    assert [(r["hidden"], r["batch"], r["density"]) for r in rec["results"].values()] == \
        list(dense_steps.LAYERS)
    sim = rec["simulated"]["results"]
    for key, r in rec["results"].items():
        row = [key.rsplit("-d", 1)[0]]
        for kind in dense_steps.KERNELS:
            c, s = r[kind]["campaign"], r[kind]["stamped"]
            assert c["max_rel_err"] < 1e-3 and s["max_rel_err"] < 1e-3, (key, kind)
            summ = s["summary"]
            assert len(summ["step_series_ns"]) == dense_steps.STEPS - 10   # steps 8 to T-2
            row += [f"{_ns(c['per_step_s']):.0f}",
                    f"{summ['step_ns']:.0f} / {summ['step_mean_ns']:.0f}",
                    f"{_ns(sim[key][kind]['per_step_s']):.0f}"]
            excess = _ns(c["per_step_s"]) / summ["step_mean_ns"] - 1
            if kind == "dense":
                # the README: 15-27% at batch 1, not at batch 4
                assert (0.15 < excess < 0.28) if r["batch"] == 1 else abs(excess) < 0.05, key
        row = "| " + " | ".join(row) + " |"
        assert row in README, row


def _cell(x):
    return f"{_ns(x):.0f}"


def test_the_stamp_tables_are_the_records_and_the_fence_helps_small_slots():
    first, second = _load("stamp_effect_first.json"), _load("stamp_effect.json")
    for rec in (first, second):
        _h200(rec)
        assert all(r["status"] == "ok" for r in rec["results"].values())
    assert second["forms"] == list(stamp_effect.FORMS)
    for key, r in second["results"].items():
        kind, h, b = re.match(r"(\w+)-h(\d+)-b(\d+)", key).groups()
        cells = []
        for form in stamp_effect.FORMS:
            vals = [rec["results"][key][form]["per_step_s"] for rec in (first, second)
                    if key in rec["results"] and form in rec["results"][key]]
            cells.append(" / ".join(_cell(v) for v in vals))
        row = f"| {kind} h{h}-b{b} | " + " | ".join(cells) + " |"
        row = re.sub(r"(\|  )+\|", lambda m: "| " * (m.group(0).count("|") - 1) + "|", row)
        assert row.replace("  ", " ") in README.replace("  ", " "), row
        for rec in (first, second):         # the stores removed: the plain kernel, within 8%
            x = rec["results"].get(key, {})
            if "none" in x:
                assert abs(x["none"]["per_step_s"] / x["plain"]["per_step_s"] - 1) < 0.08, key
        plain, fenced = r["plain"]["per_step_s"], r["fence"]["per_step_s"]
        if int(h) * int(b) <= 4096:
            assert fenced < 0.98 * plain, key          # every vanilla one-group kernel


def _wait_rows(name: str, forms: tuple, layers: tuple) -> dict:
    """The record ``name``'s steps per layer and form, after checking that its forms and layers
    are ``forms`` and ``layers``, every run ok and its README row (each form beside the plain
    kernel) present."""
    rec = _load(name)
    _h200(rec)
    assert rec["forms"] == list(forms)
    assert list(rec["results"]) == [f"{k}-h{h}-b{b}-d{d}" for k, h, b, d in layers]
    out = {}
    for key, r in rec["results"].items():
        assert r["status"] == "ok", key
        t = {f: r[f]["per_step_s"] for f in forms}
        kind, h, b = re.match(r"(\w+)-h(\d+)-b(\d+)", key).groups()
        row = f"| {kind} h{h}-b{b} | {_cell(t['plain'])} | " + " | ".join(
            f"{_cell(t[f])} ({100 * (t[f] / t['plain'] - 1):+.0f}%)" for f in forms[1:]) + " |"
        assert row in README, row
        out[key] = t
    return out


def test_a_short_wait_does_more_than_the_fence_and_a_long_one_too_much():
    rows = _wait_rows("stamp_effect_delay.json", stamp_effect.DELAY_FORMS,
                      stamp_effect.LAYERS[:4])
    for key, t in rows.items():
        assert t["sleep200"] < t["fence"] < t["plain"] and t["sleep200"] < 0.82 * t["plain"], key
        assert t["sleep800"] > t["sleep200"], key
    for form, text in stamp_effect.STEP_END.items():
        assert text.startswith("__threadfence" if form == "fence" else "__nanosleep"), form


def test_the_waits_length_the_records_and_200_ns_the_best():
    rows = _wait_rows("stamp_effect_waits.json", stamp_effect.WAIT_FORMS, stamp_effect.LAYERS)
    for key, t in rows.items():
        assert t["sleep200"] < 1.015 * t["plain"], key       # never more than 1.5% slower
    assert sum(min(t, key=t.get) == "sleep200" for t in rows.values()) == 6


def test_the_fence_over_cells_is_the_records_and_mixed_beyond_vanilla_one_group():
    rec = _load("step_fence.json")
    _h200(rec)
    names = {"lstm": "LSTM ", "gru": "GRU ", "rnn": ""}
    seen = 0
    for key, r in rec["results"].items():
        if r["status"] == "does not fit":
            continue
        assert r["status"] == "ok", key
        a, b = r["plain"]["per_step_s"], r["fence"]["per_step_s"]
        label = (f"{r['kernel']} {names[r['cell']]}"
                 + ("fp16 " if r["dtype"] == "fp16" else "") + f"h{r['hidden']}-b{r['batch']}")
        row = f"| {label} | {_cell(a)} | {_cell(b)} | {100 * (b - a) / a:+.0f}% |"
        row = row.replace("| +0% |", "| 0% |").replace("| -0% |", "| 0% |")
        assert row in README, row
        seen += 1
        if r["cell"] == "rnn" and r["hidden"] * r["batch"] <= 4096:
            assert b < 0.98 * a, key
    assert seen == 13
    assert [(c, d, h, b, x) for c, d, h, b, x in step_fence.LAYERS] == [
        (r["cell"], r["dtype"], r["hidden"], r["batch"], r["density"])
        for r in rec["results"].values() if r["kernel"] == "sparse"]


def test_the_repeat_on_another_machine_says_the_same_of_the_vanilla_one_group_kernels():
    first = {**_load("stamp_effect.json")["results"], **_load("step_fence.json")["results"]}
    again = {**_load("stamp_effect_repeat.json")["results"],
             **_load("step_fence_repeat.json")["results"]}
    assert set(first) == set(again)
    vanilla, flips = 0, 0
    for key, r in first.items():
        if r["status"] != "ok":
            continue
        change = [x["fence"]["per_step_s"] / x["plain"]["per_step_s"] - 1 for x in (r, again[key])]
        if r.get("cell", "rnn") == "rnn" and r["hidden"] * r["batch"] <= 4096:
            vanilla += 1
            assert all(c < -0.025 for c in change) and abs(change[0] - change[1]) < 0.075, key
        elif r.get("cell", "rnn") != "rnn":
            flips += (change[0] > 0) != (change[1] > 0)
    assert vanilla == 9 and flips == 3
    big = "sparse-rnn-fp32-h3584-b8-d0.02"
    assert all(x[big]["fence"]["per_step_s"] > 1.1 * x[big]["plain"]["per_step_s"]
               for x in (first, again))


def test_the_simulator_moves_little_between_the_exchange_forms():
    sim = _load("store_flush.json")["simulated"]["results"]
    moves = [sim[f"x_{w}_b{b}_{a}"]["per_op_s"] / sim[f"x_{w}_b{b}"]["per_op_s"] - 1
             for w, b in store_flush.LAYOUTS for a in store_flush.AFTERS if a]
    assert 0.10 < max(abs(m) for m in moves) < 0.11      # the README: at most 11%


def test_the_exchange_alone_is_too_noisy_between_calls_to_isolate_the_fence():
    first, second = _load("store_flush_first.json"), _load("store_flush.json")
    keys = {k for k, *_ in store_flush.entries()}
    assert set(second["results"]) == keys and set(first["results"]) < keys
    for rec in (first, second):
        _h200(rec)
        for key, r in rec["results"].items():
            assert r["status"] == "ok", key
        assert set(rec["simulated"]["results"]) >= set(rec["results"])
    ratio = [second["results"][k]["per_op_s"] / first["results"][k]["per_op_s"]
             for k in first["results"]]
    assert max(abs(x - 1) for x in ratio) > 0.25       # the README: up to 30% apart


def test_placements_of_the_buffers_move_a_step_little():
    rec = _load("alloc_spread.json")
    _h200(rec)
    for key, r in rec["results"].items():
        assert r["status"] == "ok", key
        steps = [p["per_step_s"] for p in r["placements"]]
        addrs = {p["hseq_address"]["128"] for p in r["placements"]}
        assert len(addrs) == len(steps) == 6, key     # six different places
        assert max(steps) / min(steps) < 1.08, key     # 2-4% either way of the middle


def _small(spec):
    return dataclasses.replace(spec, sm_count=8)


def test_the_step_fence_is_an_option_and_off():
    """The kernels generate no fence in the Lamport step unless asked; asked, the fence closes
    the step (after the h stores), the values hold in the simulator, and the barrier kernel is
    untouched by the option."""
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels import sparse_rnn
    from kernels_ir.kernels.sparse_rnn import build_dense_rnn, build_sparse_rnn, make_layer

    assert sparse_rnn.LAMPORT_STEP_FENCE is False
    spec = _small(load_spec("h200"))
    layer = make_layer(256, 1, 0.1, 3, seed=1)
    for build in (lambda **k: build_sparse_rnn(layer, spec, layout="optimal", **k),
                  lambda **k: build_dense_rnn(layer, spec, **k)):
        store = "g_hseq[r_tmp] = r_val;\n        }\n"    # the step's last h store's block
        wait = f"        __nanosleep({sparse_rnn.LAMPORT_STEP_WAIT_NS});\n"
        plain = generate(build(sync="lamport").kernel).code
        assert plain[plain.rindex(store):].startswith(store + wait + "    }\n}")
        prog = build(sync="lamport", step_fence=True)
        code = generate(prog.kernel).code
        assert code.count("__threadfence();") == plain.count("__threadfence();") + 1
        # the fence right after it, then the step's wait, closing the time loop
        assert code[code.rindex(store):].startswith(
            store + "        __threadfence();\n" + wait + "    }\n}")
        res = simulate(prog.kernel, prog.inputs, spec, l2_warm=True)
        assert prog.max_rel_err(res.globals) < 1e-3
        bar = [generate(build(sync="barrier", step_fence=f).kernel).code for f in (False, True)]
        assert bar[0] == bar[1]


@pytest.mark.parametrize("after", ["store", "fence", "delay"])
def test_the_exchange_benchmarks_after_forms_run_and_check(after):
    from gpusim.engine import simulate
    from gpusim.specs import load_spec
    from kernels_ir.codegen_cuda import generate
    from kernels_ir.kernels.microbench.lamport_kernel import DELAY_FMAS, exchange

    spec = _small(load_spec("h200"))
    mb = exchange(rounds=3, words=1024, batch=1, ctas=8, after=after)
    assert mb.name == f"lmech_x_1024_{after}" and mb.params["after"] == after
    code = generate(mb.kernel).code
    plain = generate(exchange(rounds=3, words=1024, batch=1, ctas=8).kernel).code
    assert code.count("__threadfence();") - plain.count("__threadfence();") == (after == "fence")
    if after == "delay":
        assert code.count("fmaf") >= DELAY_FMAS
    res = simulate(mb.kernel, mb.inputs, spec, l2_warm=True)
    assert mb.check(res.globals)
    if after != "fence":               # the scratch line is checked: lane 0's last value
        bad = dict(res.globals)
        bad["scratch"] = bad["scratch"] * 0
        assert not mb.check(bad)
    assert "after" not in exchange(rounds=3, words=1024, batch=1, ctas=8).params
