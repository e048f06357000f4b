"""``measurements/h200/poll_contention.json.gz`` (polling warps beside streaming warps) and
``measurements/h200/lamport_trace_dense.json`` (the dense kernel's per-warp step stamps, with
the simulator's): measurements/README.md's tables are the records', and what the section says
of them holds: wide polls slow a near-saturated stream of shared loads or shuffles by 10% or
more and an FFMA stream by little, narrow polls slow nothing much; the GPU's warps mostly find
their data at the first poll while the simulator's almost never do; stores do not stall; a
clock read after the barrier can issue before its release."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from measurements.lamport_trace import (  # noqa: E402
    DENSE_FIELDS,
    DENSE_LAYERS,
    build_kernel,
    instrumented_code,
    poll_table,
    producers,
)
from measurements.poll_contention import (  # noqa: E402
    STREAMERS,
    configs,
    stream_cycles,
    table,
)
from measurements.probe import read_record  # noqa: E402

H200 = ROOT / "measurements" / "h200"
README = (ROOT / "measurements" / "README.md").read_text()
CONT = read_record(str(H200 / "poll_contention.json.gz"))
TRACE = read_record(H200 / "lamport_trace_dense.json")


def test_the_contention_record_is_complete():
    assert "H200" in CONT["provenance"]["gpu_name"]
    runs = {(r["kind"], r["poll"], r["streamers"], r["pollers"]) for r in CONT["runs"]}
    assert runs == set(configs())
    assert len(CONT["runs"]) == len(configs()) * CONT["repeats"]
    for r in CONT["runs"]:     # the first repeat keeps every warp's value, 132 CTAs
        if r["repeat"] == 0:
            assert len(r["raw_stream_cycles_per_iter"]) == CONT["ctas"] == 132
            assert np.median(r["raw_stream_cycles_per_iter"]) == \
                pytest.approx(r["stream_cycles_per_iter_median"], abs=1e-3)


def test_the_readme_quotes_the_contention_table():
    for row in table(CONT):
        assert row in README, row


def test_wide_polls_slow_shared_streams_and_narrow_ones_do_not():
    c = stream_cycles(CONT)
    for kind in ("lds", "shfl"):
        for s in (4, 6):
            assert c[(kind, "wide", s, 4)] > 1.10 * c[(kind, None, s, 0)], (kind, s)
            assert c[(kind, "narrow", s, 8)] < 1.05 * c[(kind, None, s, 0)], (kind, s)
    for s in STREAMERS:
        assert c[("ffma", "wide", s, 8)] < 1.07 * c[("ffma", None, s, 0)], s
    assert c[("lds", "wide", 1, 8)] < 1.05 * c[("lds", None, 1, 0)]


def test_the_trace_record_is_complete():
    assert "H200" in TRACE["provenance"]["gpu_name"] and TRACE["kernel"] == "dense"
    assert TRACE["fields"] == list(DENSE_FIELDS) and TRACE["spec"] == "h200"
    keys = [f"h{h}-b{b}-d{d}" for h, b, d in DENSE_LAYERS]
    assert list(TRACE["results"]) == keys
    assert set(TRACE["simulated"]["results"]) == set(keys)
    for r in TRACE["results"].values():
        assert r["status"] == "ok"
        for mode in ("plain", "normal", "inplace"):
            assert r[mode]["max_rel_err"] <= 1e-3 and len(r[mode]["launch_s"]) == 7


def test_the_readme_quotes_the_trace_table():
    for row in poll_table(TRACE):
        assert row in README, row


def _share(polls, ok):
    return sum(v[0] for k, v in polls.items() if ok(int(k)))


def test_the_gpu_finds_its_data_at_the_first_poll_and_the_simulator_does_not():
    for key, r in TRACE["results"].items():
        gpu = r["normal"]["distribution"]["polls"]
        sim = TRACE["simulated"]["results"][key]["normal"]["polls"]
        assert _share(gpu, lambda n: n == 1) >= 0.43, key
        assert _share(sim, lambda n: n == 1) <= 0.33, key
        assert sum(v[0] for v in gpu.values()) == pytest.approx(1.0)
        assert sum(v[0] for v in sim.values()) == pytest.approx(1.0)
        # without waiting every warp's first poll succeeds
        inplace = r["inplace"]["distribution"]["polls"]
        assert list(inplace) == ["1"] and inplace["1"][0] == 1.0, key


def test_the_gpus_tail_is_a_step_and_a_group_of_lines():
    """At batch 1 up to h712 the GPU's detection latency varies between (step, warp) pairs
    (every CTA's warp w polls the same lines) far more than between consumer CTAs, and more
    than the simulator's does."""
    for key in ("h264-b1-d0.1", "h392-b1-d0.1", "h624-b1-d0.1", "h712-b1-d0.1"):
        g = TRACE["results"][key]["normal"]["distribution"]["detection_sd_ns"]
        s = TRACE["simulated"]["results"][key]["normal"]["detection_sd_ns"]
        assert 100 < g["step_warp_means"] < 175 and g["cta_means"] < 20, key
        assert g["step_warp_means"] > 0.7 * g["total"], key
        assert s["step_warp_means"] < 45, key
        assert abs(TRACE["results"][key]["normal"]["distribution"]["producer_lateness_corr"]) \
            < 0.2, key


def test_stores_do_not_stall_and_an_early_warp_reads_the_clock_before_the_release():
    for key, r in TRACE["results"].items():
        n, i = r["normal"]["summary"], r["inplace"]["summary"]
        assert abs(n["store_issue_ns"] - i["store_issue_ns"]) < 2.0, key
    w = TRACE["results"]["h712-b1-d0.1"]["normal"]["distribution"]["per_warp_after_t0_ns"]
    assert max(w["t2"][6:]) < 250 and min(w["t2"][:6]) > 550      # warps 6, 7 poll nothing
    assert max(w["tq"]) - min(w["tq"]) < 5                         # after the shared loads
    w = TRACE["results"]["h624-b1-d0.1"]["normal"]["distribution"]["per_warp_after_t0_ns"]
    assert max(w["t2"]) - min(w["t2"]) < 15                        # here: after the release


def test_the_dense_stamps_and_the_pollers_map():
    from gpusim.specs import load_spec
    from kernels_ir.codegen_cuda import generate
    from measurements.lamport_trace import _with_ts

    spec = load_spec("h200")
    prog = build_kernel(712, 1, 0.1, 4, spec, dense=True)
    code = instrumented_code(generate(_with_ts(prog.kernel, 4, dense=True)).code, 4,
                             dense=True)
    assert code.count("g_ts[ts_i + 7] = (int)clock64();") == 1
    assert code.index("g_ts[ts_i + 7]") < code.index("g_hseq[r_tmp] = r_val;")
    prods = producers(prog)      # thread t polls words 4t..4t+3: warp w rows 128w.., 8 a CTA
    assert [list(p) for p in prods[:5]] == [list(range(16 * w, 16 * w + 16)) for w in range(5)]
    assert list(prods[5]) == list(range(80, 89)) and not len(prods[6]) and not len(prods[7])


def test_the_h100_sparse_trace_has_the_same_tail():
    """measurements/README.md: the H100's sparse Lamport trace, recomputed from its stamps,
    varies by (step, warp) as the dense one does, not by consumer CTA."""
    from gpusim.specs import load_spec
    from measurements.lamport_trace import ONE_GROUP_WORDS, gpu_distribution, read_raw

    spec = load_spec("h100")
    path = ROOT / "measurements" / "h100" / "lamport_trace.json"
    rec = json.loads(path.read_text())
    raw = read_raw(str(path))
    want = {"h2824-b1-d0.0211": (173, 222), "h1336-b2-d0.0234": (106, 164),
            "h944-b4-d0.0198": (107, 165)}
    for key, r in rec["results"].items():
        if r["hidden"] * r["batch"] > ONE_GROUP_WORDS:
            continue
        prods = producers(build_kernel(r["hidden"], r["batch"], r["density"], 4, spec))
        sd = gpu_distribution(raw[f"{key}/normal"], spec.clock_hz, prods)["detection_sd_ns"]
        assert (round(sd["step_warp_means"]), round(sd["total"])) == want.pop(key), key
        assert 16 <= sd["cta_means"] < 22, key
    assert not want

