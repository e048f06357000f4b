"""measurements/tick_steps.py: where a Lamport step's warps wake on the sleep timer's ticks, the
spec's ``lamport_step_spread_ns`` drawn from it, and the analytical model's wake over that
spread."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpusim.specs import load_spec
from gpusim.specs.rules import sleep_wake_cycles
from kernels_ir.codegen_cuda import generate
from measurements import tick_steps
from measurements.probe import with_stamp_buffer
from models.analytical.persistent import _on_tick

REC = Path(__file__).resolve().parents[1] / "measurements" / "h200" / "tick_steps.json"
H200 = load_spec("h200")


@pytest.fixture(scope="module")
def rec():
    return json.loads(REC.read_text())


def test_the_stamps_sit_at_the_top_and_before_the_wait():
    prog = tick_steps.build(288, 1, 0.05, 1, 8, H200)
    code = generate(with_stamp_buffer(prog.kernel, 8, suffix="_ticks")).code
    out = tick_steps.instrumented_code(code, 8)
    assert out.count("%%globaltimer") == 1
    _, _, rest = out.partition("for (r_t = 0; r_t < 8; r_t += 1) {")
    top = rest.split("g_ts[ts_i + 1] = (int)g; }", 1)[0]    # the step's first statements
    assert "g_ts[ts_i + 0] = (int)clock64()" in top and "r_" not in top.replace("r_t", "")
    before, _, _ = rest.partition("__nanosleep(200);")
    assert before.rstrip().endswith("g_ts[ts_i + 2] = (int)clock64();")
    with pytest.raises(AssertionError, match="__nanosleep"):
        tick_steps.instrumented_code(code.replace("__nanosleep(200);", ""), 8)
    with pytest.raises(AssertionError, match="time loop"):
        tick_steps.instrumented_code(code, 9)


def _stamps(work, lock: bool, steps=40, ctas=6, warps=8, clk=1.98, seed=0):
    """Synthetic stamps: warps wake on 256 ns ticks; ``lock``: every warp wakes on the tick after
    the grid's last end (one tick for all), else each on the tick after its own end."""
    rng = np.random.default_rng(seed)
    ts = np.zeros((steps, ctas, warps, 3), np.int64)
    wake = np.full((ctas, warps), 4000 * 256.0)
    for s in range(steps):
        ph = rng.uniform(1, 9, size=(ctas, warps))
        w = work + rng.normal(0, 40, size=(ctas, warps))
        ts[s, ..., 1] = wake + ph
        ts[s, ..., 0] = (wake + ph) * clk
        ts[s, ..., 2] = (wake + ph + w) * clk
        end = wake + ph + w
        nxt = (np.floor((end + 5) / 256) + 1) * 256
        wake = np.full_like(wake, nxt.max()) if lock else nxt
    return ((ts + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)


def test_the_summary_tells_one_tick_from_many():
    locked = tick_steps.gpu_summary(_stamps(500.0, True), 5.0)
    assert locked["same_tick_share"] == 1.0 and locked["wake_phase_ns"]["max"] < 10
    assert locked["ruled_step_ns"] == pytest.approx(locked["step_ns"], abs=1.0)
    assert abs(locked["clock_mhz"] - 1980) < 5
    # one tick for all: the grid's last end is the work plus the wake's phase and the largest
    # of 48 normal draws (sd 40 ns: about 2.2 sd above the mean), its spread a fraction of 40
    w = locked["work_max_ns"]
    assert 560 < w["mean"] < 620 and 5 < w["std"] < 30
    assert locked["work_mean_ns"] == pytest.approx(505, abs=5)
    loose = tick_steps.gpu_summary(_stamps(500.0, False), 5.0)
    assert loose["same_tick_share"] < 0.5 and len(loose["periods"]) >= 2


def test_the_summary_does_not_see_the_timers_wrap():
    """The stamps keep the timer's low 32 bits as a signed int: a launch whose stamps cross the
    wrap of that int (2^31 - 1 to -2^31) is summarised as one that does not, even where the warps
    of its first step lie on both sides of it."""
    ts = _stamps(500.0, False)[10:]       # from a step where the warps are on different ticks
    shifted = ts.astype(np.int64)
    t = shifted[..., 1] % 2 ** 32
    ticks = np.unique(t[0] // 256)
    assert len(ticks) >= 2
    # move every timer stamp by a multiple of 256 so that the wrap falls between the first
    # step's ticks
    delta = 2 ** 31 - int(ticks[-1]) * 256
    shifted[..., 1] = (t + delta + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert (shifted[0, ..., 1] < 0).any() and (shifted[0, ..., 1] > 0).any()
    a = tick_steps.gpu_summary(ts, 5.0)
    b = tick_steps.gpu_summary(shifted.astype(np.int32), 5.0)
    assert a["work_max_ns"] == pytest.approx(b["work_max_ns"])
    assert a["periods"] == b["periods"] and a["step_ns"] == b["step_ns"]


def test_the_record_every_layer_checked_and_its_steps_mix_tick_counts(rec):
    """The GPU's finding: every warp wakes on a tick (phase under 33 ns, the timer's resolution
    32 ns), the grid's warps share one tick in at most an eighth of the steps, and at every
    layer at least 4% of a warp's steps take another number of periods than the most common
    (4-53%)."""
    assert len(rec["results"]) == len(tick_steps.LAYERS) == 16
    for key, r in rec["results"].items():
        assert r["status"] == "ok", key
        assert r["stamped"]["max_rel_err"] <= 1e-3
        s = r["stamped"]["summary"]
        assert s["wake_phase_ns"]["p99"] <= 32
        assert s["same_tick_share"] <= 0.125, key
        counts = sorted(s["periods"].values(), reverse=True)
        assert 1 - counts[0] / sum(counts) >= 0.04, key
        # the stamps change the step by -5% to +13% (the plain kernel is the campaign's)
        assert 0.94 <= s["step_ns"] / (r["plain"]["per_step_s"] * 1e9) <= 1.14, key


def test_the_spec_spread_is_the_records(rec):
    assert round(tick_steps.spread_ns(rec)) == H200.lamport_step_spread_ns == 107
    stds = [r["stamped"]["summary"]["work_max_ns"]["std"] for r in rec["results"].values()]
    assert 80 <= min(stds) and max(stds) <= 155
    for gpu in ("h100", "v100"):    # carried over, said so
        spec = load_spec(gpu)
        assert spec.lamport_step_spread_ns == 107
        assert "carried over" in spec.source("lamport_step_spread_ns")


@pytest.mark.parametrize("work_ns", [300.0, 500.0, 511.0, 700.0, 2000.0])
def test_the_models_wake_is_the_mean_over_the_spread(work_ns):
    clock = H200.clock_hz * 1e-9
    work = np.array([work_ns * clock])
    still = dataclasses.replace(H200, lamport_step_spread_ns=0.0)
    assert _on_tick(still, 200, work) == pytest.approx(sleep_wake_cycles(H200, 200, work))
    got = float(_on_tick(H200, 200, work)[0]) / clock
    lead = H200.sleep_tick_lead_ns
    assert work_ns + lead < got < work_ns + lead + 256
    # a spread of 107 ns (0.42 of the period) is near the limit of ends at every phase: the
    # work plus the lead plus half a period
    assert got == pytest.approx(work_ns + lead + 128, abs=8)
    # a Monte Carlo of the same rule
    rng = np.random.default_rng(1)
    ends = work_ns + lead + rng.normal(0, H200.lamport_step_spread_ns, 200_000)
    assert got == pytest.approx(np.mean((np.floor(ends / 256) + 1) * 256), abs=1.5)


def test_the_model_on_the_probes_layers(rec):
    """Today's model beside the GPU on the probe's 16 layers: with the spread it is closer than
    the whole-tick rule was (every model step there was 768, 1024 or 1280 ns); the record's
    ``simulated`` block holds today's model."""
    errs = []
    for key, r in rec["results"].items():
        gpu = r["plain"]["per_step_s"] * 1e9
        m = tick_steps.model_work(H200, r["hidden"], r["batch"], r["density"], r["seed"])
        assert m == pytest.approx(rec["simulated"]["results"][key]["model"], rel=1e-9), key
        still = (np.floor((m["work_ns"] + H200.sleep_tick_lead_ns) / 256) + 1) * 256
        errs.append((abs(m["step_ns"] / gpu - 1), abs(still / gpu - 1)))
    now, before = np.mean(errs, axis=0)
    assert now < 0.08 and before > 0.12
