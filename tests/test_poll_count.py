"""``measurements/poll_count.py``: the stamps it puts into a ring's CUDA, its summaries, and the
H200 record (``measurements/h200/poll_count.json``) with the README's tables and claims."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from measurements import poll_count

ROOT = Path(__file__).resolve().parents[1]
H200 = ROOT / "measurements" / "h200"


def _code(key: str) -> str:
    from gpusim.backends.cupy_backend import generate
    mb = poll_count._build(key, poll_count.ROUNDS)
    return generate(poll_count._with_ts(mb.kernel, poll_count.ROUNDS)).code


@pytest.mark.parametrize("key", [k for k, *_ in poll_count.EXPERIMENTS])
def test_every_ring_takes_the_stamps(key):
    code = poll_count.instrumented_code(_code(key), poll_count.ROUNDS)
    n_loops = code.count("++ts_polls; if (!r_warp_waiting) break;")
    assert n_loops == (2 if key.startswith("132") else 1)
    for f in range(len(poll_count.FIELDS)):
        assert f"g_ts[ts_i + {f}]" in code
    assert "int* g_ts" in code


def test_a_ring_without_the_expected_shape_is_refused():
    code = _code("33_exact_few_warps_c1")
    with pytest.raises(AssertionError, match="round loop"):
        poll_count.instrumented_code(code, poll_count.ROUNDS + 1)
    with pytest.raises(AssertionError, match="round barrier"):
        poll_count.instrumented_code(code.replace("__syncthreads();", ""), poll_count.ROUNDS)


def test_summary_counts_polls_and_places_detection():
    rounds, ctas, warps = 6, 3, 2
    t0 = np.arange(rounds)[:, None, None] * 100.0 + np.zeros((rounds, ctas, warps))
    polls = np.ones((rounds, ctas, warps))
    polls[:, 1, :] = 2                                   # CTA 1 polls twice a round
    t1 = t0 + 20.0 * polls
    t3 = t0 + 60.0
    polling = np.ones((ctas, warps), bool)
    writers = np.zeros((ctas, warps), bool)
    writers[0, 0] = True
    s = poll_count.summary(t0, t1, polls, t3, polling, writers)
    assert s["polls_per_warp_round"] == pytest.approx(4 / 3)
    assert s["polls_share_1_2_3_4plus"] == pytest.approx([2 / 3, 1 / 3, 0, 0])
    assert s["round_ns"] == 100 and s["one_poll_ns"] == 20
    # round r + 1's exits (t0 + 100 + 20 or 40) after round r's last store (t0 + 60)
    assert s["detection_percentiles_ns"][0] == pytest.approx(60)
    assert s["poll_only"]["polls_per_warp_round"] == pytest.approx(1.5)
    assert s["writer_ctas"]["first_poll_share"] == 1.0


def test_the_store_delay_is_in_the_ring_and_keeps_its_values():
    from gpusim.specs import load_spec
    r = poll_count.simulate_ring(load_spec("h200"), "33_exact_few_warps_c1_sd16", rounds=6)
    assert np.array(r["writers"]).sum() == 33 * 8        # lanes 0-3 of every warp of 33 CTAs
    code = _code("33_exact_few_warps_c1_sd16")
    assert code.count("__fmaf_rn(") >= 17                # the chain and the fma(x, 0, val)


def test_the_h200_record_and_its_tables(measurements_section):
    rec = json.loads((H200 / "poll_count.json").read_text())
    rep = json.loads((H200 / "poll_count_repeat.json").read_text())
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(rec["results"]) == {k for k, *_ in poll_count.EXPERIMENTS}
    assert all(r["status"] == "ok" for r in rec["results"].values())
    sim = rec["simulated"]["results"]
    section = measurements_section("## How many polls a warp makes")
    for key, *_ in poll_count.CURVE:
        g, s, r = rec["results"][key]["summary"], sim[key], rep["results"][key]["summary"]
        row = (f"{g['polls_per_warp_round']:.2f} ({r['polls_per_warp_round']:.2f}) / "
               f"{s['polls_per_warp_round']:.2f} | {100 * g['polls_share_1_2_3_4plus'][0]:.0f}% "
               f"({100 * r['polls_share_1_2_3_4plus'][0]:.0f}%) / "
               f"{100 * s['polls_share_1_2_3_4plus'][0]:.0f}%")
        assert row in section, row
        assert g["polls_per_warp_round"] < s["polls_per_warp_round"]
        if not key.startswith("132"):        # two loops there: 2 polls at least
            assert g["polls_share_1_2_3_4plus"][0] >= 0.55
            assert s["polls_share_1_2_3_4plus"][0] <= 0.03
    first = [rec["results"][k]["summary"]["poll_only"]["first_poll_share"]
             for k in ["33_exact_few_warps_c1"] + [k for k, *_ in poll_count.DELAYS]]
    assert first == sorted(first, reverse=True) and first[-1] < 0.01 and first[3] >= 0.05
    assert max(sim[k]["poll_only"]["first_poll_share"] for k, *_ in poll_count.DELAYS) <= 0.03
    for n, f in zip((0, 16, 32, 64, 128), first, strict=True):
        assert f"| {n} (about {4 * n}) | {100 * f:.1f}% / " in section


def test_the_probe_helpers_stamp_one_kernel_and_restore_the_generator():
    import gpusim.backends.cupy_backend as cb
    from measurements.probe import compile_instrumented, with_stamp_buffer

    mb = poll_count._build("33_exact_few_warps_c1", 8)
    k = with_stamp_buffer(mb.kernel, 16)
    assert k.name.endswith("_stamped") and k.buffers[-1].name == "ts"
    assert k.buffers[-1].size == 16 and k.buffers[-1].role == "out"
    original = cb.generate

    class Runner:                  # compiles as the CuPy runner does: through cb.generate
        def compile(self, kernel, cooperative=False):
            return cb.generate(kernel).code

    code = compile_instrumented(Runner(), k, lambda c: c + "\n// stamped\n")
    assert code.endswith("// stamped\n")
    assert cb.generate is original
    assert not Runner().compile(mb.kernel).endswith("// stamped\n")


def test_the_timer_axis_puts_two_sms_clocks_on_one_axis():
    """Two CTAs whose clocks start 1e9 cycles apart (one near the 32-bit wrap) and run at 2 GHz
    against a 1 ns timer: stamps taken at the same moment land on the same ns."""
    from measurements.probe import timer_axis, wrap32

    rounds = 12
    true_ns = np.arange(rounds) * 500.0 + 1000.0               # round starts, both SMs
    ts = np.zeros((rounds, 2, 2, 5), np.int64)
    for c, start in enumerate((5, 2 ** 32 - 400)):             # CTA 1's clock wraps
        clock = start + 2 * true_ns
        ts[:, c, :, 0] = wrap32(clock)[:, None]
        ts[:, c, :, 4] = true_ns[:, None]
        ts[:, c, :, 1] = wrap32(clock + 2 * 123)[:, None]     # 123 ns after the round start
    t0, t1 = timer_axis(ts, (0, 1), timer=4)
    assert np.allclose(t0, true_ns[:, None, None], atol=1e-6)
    assert np.allclose(t1 - t0, 123, atol=1e-6)
    assert wrap32(np.int64(5) - np.int64(2 ** 32 - 3)) == 8


def test_chunk_writers_follow_the_rings_deal():
    w33 = poll_count.chunk_writers("33_exact_few_warps_c1")
    # warp 0 polls chunks 0-31 (logical lines 0-3: CTAs 0, 4, 8, 12, every warp) and 256-263
    # (logical line 32: CTA 128)
    assert w33[0] == sorted({8 * c + w for c in (0, 4, 8, 12, 128) for w in range(8)})
    assert w33[7] == sorted({8 * c + w for c in (112, 116, 120, 124) for w in range(8)})
    # 66 lines (528 chunks): warp 0 polls chunks 0-31, 256-287 and 512-527 (10 CTAs), the
    # others two runs of 32 (8 CTAs)
    w66 = poll_count.chunk_writers("66_exact_few_warps_c1")
    assert [len(x) for x in w66] == [80] + [64] * 7
    assert all(c % 2 == 0 for x in w66 for c in {i // 8 for i in x})


def test_first_poll_by_lag_bins_the_store_lag():
    key = "33_exact_few_warps_c1"
    rounds, ctas, warps = 3, 132, 8
    t0 = np.zeros((rounds, ctas, warps))
    t0[1:] = 1000.0                                   # round 1 and 2 begin at 1000 ns
    t3 = np.zeros((rounds, ctas, warps))
    writers = np.zeros((ctas, warps), bool)
    writers[::4] = True                               # the 33 writer CTAs
    t3[:] = 900.0                                     # stores 100 ns before the polls
    t3[0, 0, 0] = 1020.0                              # but in round 0 one store 20 ns after
    polls = np.ones((rounds, ctas, warps))
    polls[1, :, 0] = 2                                # warp 0 (which polls CTA 0) polled twice
    polling = np.ones((ctas, warps), bool)
    out = poll_count.first_poll_by_lag(t0, polls, t3, polling, writers, key)
    edges = (-np.inf, *poll_count.LAG_EDGES_NS, np.inf)
    only = out["poll_only"]
    i20 = next(i for i in range(len(edges) - 1) if edges[i] <= 20 < edges[i + 1])
    i100 = next(i for i in range(len(edges) - 1) if edges[i] <= -100 < edges[i + 1])
    assert only["warp_rounds"][i20] == 99                # warp 0 of the 99 poll-only CTAs
    assert only["first_poll_share"][i20] == 0.0
    assert only["warp_rounds"][i100] == 99 * 8 * 2 - 99
    assert only["first_poll_share"][i100] == 1.0
    assert sum(out["writer_ctas"]["warp_rounds"]) == 33 * 8 * 2
    # a ring with two poll loops a round has no such curve
    assert poll_count.first_poll_by_lag(t0, polls, t3, polling, writers,
                                        "132_exact_warps_c1") is None


def _pooled(results):
    n = np.zeros(len(poll_count.LAG_EDGES_NS) + 1)
    ok = np.zeros_like(n)
    for s in results:
        lag = s.get("first_poll_by_lag")
        for role in ("poll_only", "writer_ctas") if lag else ():
            c = np.array(lag[role]["warp_rounds"], float)
            sh = np.array([0.0 if x is None else x for x in lag[role]["first_poll_share"]])
            n += c
            ok += c * sh
    return n, np.divide(ok, n, out=np.full_like(n, np.nan), where=n > 0)


def test_the_lag_record_and_its_claims(measurements_section):
    rec = json.loads((H200 / "poll_count_lag.json").read_text())
    assert rec["provenance"]["gpu_name"] == "NVIDIA H200"
    assert set(rec["results"]) == {k for k, *_ in poll_count.EXPERIMENTS}
    assert all(r["status"] == "ok" for r in rec["results"].values())
    gpu = [r["summary"] for r in rec["results"].values()]
    sim = list(rec["simulated"]["results"].values())
    arr = list(rec[poll_count.WHATIF_SECTION]["results"].values())
    assert rec[poll_count.WHATIF_SECTION]["overrides"] == poll_count.WHATIF
    edges = (-np.inf, *poll_count.LAG_EDGES_NS, np.inf)
    cols = [(-200, -100), (-100, -50), (-50, 0), (0, 50), (50, 100), (100, 150)]
    idx = [edges.index(a) for a, _ in cols]
    section = measurements_section("## When a poll sees a store")
    for name, res in (("GPU", gpu), ("simulator", sim), ("seen on arrival", arr)):
        n, share = _pooled(res)
        row = f"| {name} | " + " | ".join(f"{100 * share[i]:.0f}%" for i in idx) + " |"
        assert row in section, row
    n, g = _pooled(gpu)
    # the GPU: seen when the store came first, half the time 0-50 ns after, never 100 ns after
    assert g[edges.index(-100)] > 0.9 and 0.35 < g[edges.index(0)] < 0.65
    assert g[edges.index(50)] < 0.15 and g[edges.index(100)] < 0.01
    # the same curve with 33 pollers of a line and with 132 (the 0..50 ns bin)
    solo = rec["results"]["33_exact_few_warps_c1_solo"]["summary"]["first_poll_by_lag"]
    full = rec["results"]["33_exact_few_warps_c1"]["summary"]["first_poll_by_lag"]
    i0 = edges.index(0)
    assert abs(solo["writer_ctas"]["first_poll_share"][i0]
               - full["poll_only"]["first_poll_share"][i0]) < 0.2
    # today's simulator sees little stored less than 100 ns before and nothing later than 50
    # ns before, where the GPU sees most of it; seen on arrival is close
    _, s = _pooled(sim)
    assert s[edges.index(-100)] < 0.35 < g[edges.index(-100)]
    assert np.nanmax(s[edges.index(-50):]) < 0.05
    _, a = _pooled(arr)
    assert a[edges.index(-50)] > 0.75 and a[edges.index(50)] < 0.1
    # polls a warp and round: seen on arrival within 0.3 of the GPU on the delayed-store rings
    # (0.1 with the engine before ptxas's issue order, 0.12 before the loop edges, 0.2 up to 64
    # FFMAs late before the replayed polls ran all three tests: 0.28 under at 32 now); today's
    # simulator 0.25 or more above (0.29-0.47 now; 0.5 before the loop edges, 0.4 before the
    # replays' tests: each makes the poll pass longer, so fewer polls miss)
    R = rec["results"]
    S, A = rec["simulated"]["results"], rec[poll_count.WHATIF_SECTION]["results"]
    for key, *_ in poll_count.DELAYS:
        gp = R[key]["summary"]["polls_per_warp_round"]
        assert abs(A[key]["polls_per_warp_round"] - gp) < 0.3
        assert S[key]["polls_per_warp_round"] - gp > 0.25


@pytest.mark.slow
def test_the_lag_records_simulated_values_are_todays():
    from gpusim.specs import load_spec
    rec = json.loads((H200 / "poll_count_lag.json").read_text())
    key = "33_exact_few_warps_c1_sd64"
    got = poll_count.simulate_ring(load_spec("h200"), key)["summary"]
    want = rec["simulated"]["results"][key]
    for f in ("polls_per_warp_round", "round_ns", "poll_loop_ns"):
        assert got[f] == pytest.approx(want[f], rel=1e-9), f
    assert got["first_poll_by_lag"] == want["first_poll_by_lag"]


def test_the_kernels_under_both_rules(measurements_section):
    """The lag record's ``kernels`` section: the 14 trace layers' stamped steps, today's spec
    and a store seen on arrival, with the figures the README quotes."""
    rec = json.loads((H200 / "poll_count_lag.json").read_text())
    k = rec["kernels"]
    assert k["overrides"] == poll_count.WHATIF and len(k["layers"]) == 14
    trace = json.loads((H200 / "lamport_trace_layers.json").read_text())
    err = {}
    for name in ("today", "seen_on_arrival"):
        e = np.array([100 * (r[name]["normal"]["per_step_ns"] / r["gpu"]["normal"]["per_step_ns"]
                             - 1) for r in k["layers"].values()])
        err[name] = e
    for key, r in k["layers"].items():            # the GPU's medians are the trace record's
        assert r["gpu"]["normal"]["per_step_ns"] == trace["results"][key]["normal"]["summary"][
            "step_ns"]
    text = " ".join(measurements_section("## When a poll sees a store").split())
    e = err["today"]
    assert (f"today's spec: MAPE {np.abs(e).mean():.1f}%, mean signed {e.mean():.1f}% (from "
            f"{e.min():.0f}% to +{e.max():.0f}%)") in text
    e = err["seen_on_arrival"]
    assert f"a store seen on arrival: MAPE {np.abs(e).mean():.1f}%, mean signed {e.mean():.1f}%" \
        in text
    assert e.max() < 0                             # every layer fast
    body = [r["gpu"]["no_wait"]["compute_ns"] - r["today"]["no_wait"]["compute_ns"]
            for r in k["layers"].values()]
    assert f"the body after the staging barrier, by {min(body):.0f}-{max(body):.0f} ns" in text


@pytest.mark.xfail(strict=True, reason="the engine's pollers rule delays a written word by N x 2 "
                   "cycles after it is visible at L2 (41 cycles after it reaches it), N the SMs "
                   "that polled its line before: its first polls see a quarter of what was "
                   "stored 50-100 ns before them and almost nothing later, the GPU 89% of "
                   "those issued 0-50 ns before")
def test_the_simulators_first_polls_see_what_the_gpus_see():
    """The lag curve's -50..0 ns bin, simulated live on the 33-line ring with 132 pollers, at
    the GPU's share (89% pooled over the rings; 89% on this ring's poll-only CTAs)."""
    from gpusim.specs import load_spec
    lag = poll_count.simulate_ring(load_spec("h200"), "33_exact_few_warps_c1")["summary"][
        "first_poll_by_lag"]
    n, share = _pooled([{"first_poll_by_lag": lag}])
    edges = (-np.inf, *poll_count.LAG_EDGES_NS, np.inf)
    assert share[edges.index(-50)] >= 0.6
