"""How many polls a warp makes before it sees a round's lines, against the pollers of a line: the
pollers curve's rings (``lamport_pollers.CURVE``) with per-warp clock stamps and poll counts.
One device call, or the simulator.

    PYTHONPATH=. python3 measurements/poll_count.py --out $OUT       # GPU: poll_count.json
    python measurements/poll_count.py --simulate measurements/h200/poll_count.json

Why: the simulator prices the pollers of a line (``l2_poll_sharer_cycles``) as a delay before a
written word is seen (N pollers x 2 cycles after it reaches L2), fitted to the curve's round
times. A round time cannot tell that from a poll that takes longer to be served while the word
is seen at once: the first makes the warps poll more often, the second makes each poll longer.
In the Lamport kernels the two differ (``lamport_trace_layers.json``: the GPU's warps see their
slot on the first poll in 52-86% of the steps at batch 1-4, the simulator's almost never). This
probe counts, ring by ring, what the round time alone does not say.

The rings are ``lamport_ring.ring`` (``exact`` order, one word checked a 16-byte chunk), each
generated from the IR; only their CUDA text is stamped here (the IR has no clock). Lane 0 of
every warp writes, per round ``r``:

- ``t0``: ``clock64`` at the top of the round (before its polls); ``g0``: ``%globaltimer`` next
  to it (each SM's clock is fitted to it over the rounds, to place stamps on one time axis);
- ``t1``: after its poll loops, before the round's ``__syncthreads``;
- ``polls``: its poll iterations of the round, over its poll loops (0: the warp's CTA does not
  poll);
- ``t3``: at the end of the round (after the writer CTAs' stores of the next round's words).

Summaries over rounds 8 to the last but two, the warps that poll (ns): polls a warp and round
(mean, and the share of warp-rounds with 1, 2, 3, 4+ polls), a poll loop's length ``t1 - t0``
(median, and that of the warp-rounds that polled once: a poll's own round trip), the round
(``t0`` to the next ``t0``), and the detection: a warp's ``t1`` of round ``r + 1`` after the
last writer's ``t3`` of round ``r`` (percentiles), and the first poll against the store lag
(:func:`first_poll_by_lag`: the share of first polls that see every word, by how long after the
poll loop began the last of its words was stored; record ``poll_count_lag.json``, with
``POLL_COUNT_RAW=1`` the stamps are also written). The simulator gives the same from its issue
cycles (``t0``: the first instruction of the round; ``t1``: the barrier's issue; ``t3``: the last
store of a writer warp; polls: 1 + the replays of the first poll load).
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from measurements.lamport_pollers import CURVE  # noqa: E402

# the 33-line ring with 132 pollers, the writers' stores 16-128 dependent FFMAs (about 64-512
# cycles) after their barrier: the 99 CTAs that only poll then poll that much before the stores
DELAYS = tuple((f"33_exact_few_warps_c1_sd{n}", 33, "exact", f"warps_few_c1_sd{n}")
               for n in (16, 32, 64, 128))
EXPERIMENTS = CURVE + DELAYS

ROUNDS = 64
FIELDS = ("t0", "t1", "polls", "t3", "g0")
TS_BUFFER = "ts"
SIM_ROUNDS = 12


def _once(code: str, old: str, new: str, what: str) -> str:
    if code.count(old) != 1:
        raise AssertionError(f"{what} not found once")
    return code.replace(old, new)


def instrumented_code(code: str, rounds: int) -> str:
    """The ring's generated CUDA with the stamps of the module docstring (``g_ts``: one int per
    field, warp, CTA and round). Raises if the code does not have the expected shape, so that a
    change of the generator cannot silently move a stamp."""
    nf = len(FIELDS)
    loop = f"for (r_r = 0; r_r < {rounds}; r_r += 1) {{\n"
    code = _once(code, loop, (
        f"{loop}        const unsigned int ts_i = ((r_r * gridDim.x + blockIdx.x) * "
        f"(blockDim.x >> 5) + (threadIdx.x >> 5)) * {nf}u;\n"
        "        const bool ts_w = (threadIdx.x & 31u) == 0u;\n"
        "        unsigned int ts_polls = 0u;\n"
        "        if (ts_w) { unsigned long long g; asm volatile(\"mov.u64 %0, %%globaltimer;\""
        " : \"=l\"(g)); g_ts[ts_i + 0] = (int)clock64(); g_ts[ts_i + 4] = (int)g; }\n"),
        "round loop")
    brk = "if (!r_warp_waiting) break;"
    if brk not in code:
        raise AssertionError("poll exit not found")
    code = code.replace(brk, "++ts_polls; " + brk)
    sync = "        __syncthreads();\n"
    code = _once(code, sync, "        if (ts_w) { g_ts[ts_i + 1] = (int)clock64(); "
                 "g_ts[ts_i + 2] = (int)ts_polls; }\n" + sync, "round barrier")
    from measurements.probe import stamp_loop_end
    return stamp_loop_end(code, 3)


def _with_ts(kernel, rounds: int):
    """The ring kernel with a ``ts`` buffer (int, role out) after its own."""
    from measurements.probe import with_stamp_buffer
    return with_stamp_buffer(kernel, rounds * kernel.grid * (kernel.block // 32) * len(FIELDS),
                             name=TS_BUFFER)


def _build(key: str, rounds: int):
    from measurements.lamport_ring import ring
    k, order, writes = next((k, o, w) for name, k, o, w in EXPERIMENTS if name == key)
    return ring(rounds, k, order, writes)


def stamp_ring(runner, key: str) -> dict:
    """One ring on the GPU: its plain launch time and the stamped launch's stamps (rounds,
    CTAs, warps, fields), values checked on both."""
    import numpy as np

    from gpusim.backends.cupy_backend import _time_launch
    from kernels_ir.errors import InputError
    from measurements.probe import compile_instrumented

    cp = runner.cp
    mb = _build(key, ROUNDS)
    stamped = _with_ts(mb.kernel, ROUNDS)
    out = {}
    for name, kernel in (("plain", mb.kernel), ("stamped", stamped)):
        comp = compile_instrumented(runner, kernel, lambda c: instrumented_code(c, ROUNDS)) \
            if name == "stamped" else runner.compile(kernel, cooperative=False)
        inputs = dict(mb.inputs)
        if name == "stamped":
            inputs[TS_BUFFER] = np.zeros(stamped.buffers[-1].size, np.int32)
        bufs = runner.device_buffers(comp, inputs)
        start = cp.asarray(inputs["h"])

        def reset(bb, start=start):
            bb["h"][...] = start
            bb["__err"][...] = 0
        times = [_time_launch(cp, runner, comp, bufs, reset) for _ in range(5)]
        got = {n: cp.asnumpy(v) for n, v in bufs.items()}
        if not mb.verify_result(got):
            raise InputError(f"{key} ({name}): wrong result")
        out[name] = {"launch_s": sorted(times)}
        if name == "stamped":
            out["ts"] = got[TS_BUFFER].reshape(ROUNDS, kernel.grid, kernel.block // 32,
                                               len(FIELDS))
    return out


LAG_EDGES_NS = (-400, -200, -100, -50, 0, 50, 100, 150, 200, 300, 400)


def chunk_writers(key: str):
    """Per warp of a polling CTA (8 warps): the flat indices (CTA x 8 + warp) of the writer warps
    whose stores it polls, from the ring's chunk deal (``lamport_ring.ring``, ``exact`` order,
    ``warps`` writes: lane ``j`` of warp ``w`` polls chunks ``32 w + j + 256 i`` below ``8 k``;
    chunk ``c`` is written by warp ``c mod 8`` of CTA ``(132 / k) (c div 8)``)."""
    from measurements.lamport_ring import CTAS, THREADS
    k = next(k for name, k, *_ in EXPERIMENTS if name == key)
    stride, chunks = CTAS // k, 8 * k
    out = []
    for w in range(THREADS // 32):
        cs = [c for lane in range(32) for c in range(32 * w + lane, chunks, THREADS)]
        out.append(sorted({stride * (c // 8) * 8 + c % 8 for c in cs}))
    return out


def first_poll_by_lag(t0, polls, t3, polling, writers, key: str) -> dict:
    """A warp's first poll of round ``r + 1`` against the store lag ``d``: the last store it
    polls (its writer warps' ``t3`` of round ``r``) minus its own ``t0`` of round ``r + 1`` (ns,
    one time axis; ``d > 0``: the store was issued after the poll loop began). Per bin of
    :data:`LAG_EDGES_NS` (and below and above), for the CTAs that only poll and for the writer
    CTAs: warp-rounds and the share whose first poll saw every word (``polls == 1``). The rings
    with more than one poll loop a round (132 lines) are left out (None)."""
    import numpy as np

    from measurements.lamport_ring import THREADS
    k = next(k for name, k, *_ in EXPERIMENTS if name == key)
    if 8 * k > 4 * THREADS:
        return None
    ctas, nw = t0.shape[1], t0.shape[2]
    flat3 = np.where(writers[None], t3, -np.inf).reshape(t3.shape[0], ctas * nw)
    last = np.stack([flat3[:, idx].max(axis=1) for idx in chunk_writers(key)], axis=1)
    d = last[:-1, None, :] - t0[1:]                   # rounds - 1, CTAs, warps
    ok = polls[1:] == 1
    only = polling & ~writers.any(axis=1, keepdims=True)
    edges = (-np.inf, *LAG_EDGES_NS, np.inf)
    out = {"edges_ns": list(LAG_EDGES_NS)}
    for name, mask in (("poll_only", only), ("writer_ctas", polling & ~only)):
        dd, oo = d[:, mask], ok[:, mask]
        fin = np.isfinite(dd)
        dd, oo = dd[fin], oo[fin]
        bins = [(dd >= a) & (dd < b) for a, b in zip(edges[:-1], edges[1:], strict=True)]
        n = [int(m.sum()) for m in bins]
        s = [float(oo[m].mean()) if m.any() else None for m in bins]
        out[name] = {"warp_rounds": n, "first_poll_share": s,
                     "lag_percentiles_ns": np.percentile(dd, [10, 50, 90]).tolist()
                     if dd.size else None}
    return out


def summary(t0, t1, polls, t3, polling, writers) -> dict:
    """The module docstring's summaries from per-round arrays (rounds, CTAs, warps) on one time
    axis in ns; ``polling``: mask (CTAs, warps) of the warps that poll, ``writers``: of the
    warps that store the next round's words."""
    import numpy as np

    p = polls[:, polling]
    loop = (t1 - t0)[:, polling]
    one = loop[p == 1]
    hist = [float((p == k).mean()) for k in (1, 2, 3)] + [float((p >= 4).mean())]
    last = np.max(np.where(writers[None], t3, -np.inf), axis=(1, 2))
    det = (t1[1:] - last[:-1, None, None])[:, polling]
    out = {"polls_per_warp_round": float(p.mean()), "polls_share_1_2_3_4plus": hist,
           "poll_loop_ns": float(np.median(loop)),
           "one_poll_ns": float(np.median(one)) if one.size else None,
           "round_ns": float(np.median(np.diff(t0[:, 0, 0]))),
           "detection_percentiles_ns": np.percentile(det, [10, 50, 90]).tolist()}
    only = polling & ~writers.any(axis=1, keepdims=True)     # CTAs that poll and never write
    if only.any() and writers.any():
        for name, mask in (("poll_only", only), ("writer_ctas", polling & ~only)):
            q = polls[:, mask]
            out[name] = {"polls_per_warp_round": float(q.mean()),
                         "first_poll_share": float((q == 1).mean()),
                         "poll_loop_ns": float(np.median((t1 - t0)[:, mask]))}
    return out


def gpu_summary(ts, polling, writers, key: str | None = None) -> dict:
    """:func:`summary` of the GPU's stamps (rounds, CTAs, warps, fields) over rounds 8 to the
    last but two, placed on one time axis (:func:`measurements.probe.timer_axis`); with the
    ring's ``key`` also :func:`first_poll_by_lag`."""
    from measurements.probe import timer_axis

    t = ts[8:-2]
    t0, t1, t3 = timer_axis(t, (0, 1, 3), timer=4)
    out = summary(t0, t1, t[..., 2], t3, polling, writers)
    if key is not None:
        out["first_poll_by_lag"] = first_poll_by_lag(t0, t[..., 2], t3, polling, writers, key)
    return out


def simulate_ring(spec, key: str, rounds: int = SIM_ROUNDS) -> dict:
    """The simulator's counterpart (rounds 2 to the last but one, buffers warm in L2, values
    checked), and the warps that poll and that write, which the GPU's summary also uses."""
    import numpy as np

    from gpusim.engine import simulate
    from gpusim.engine import timing as tm
    from kernels_ir.ir import Op, instructions

    mb = _build(key, rounds)
    ins = list(instructions(mb.kernel))
    bar = {i for i, x in enumerate(ins) if x.op is Op.BAR}
    vote = {i for i, x in enumerate(ins) if x.op is Op.VOTE_ANY}
    poll = {i for i, x in enumerate(ins) if x.op is Op.LDG_VOLATILE}
    stg = {i for i, x in enumerate(ins) if x.op is Op.STG}
    nw = mb.kernel.grid * mb.kernel.block // 32
    shape = (rounds + 1, nw)
    t0, t1, t3 = (np.full(shape, np.nan) for _ in range(3))
    n = np.zeros(shape)
    polling, writers = np.zeros(nw, bool), np.zeros(nw, bool)
    state = {"round": 0}
    original = tm._Timing._instr

    def instr(self, sid, m, flat, polls, *rest):
        original(self, sid, m, flat, polls, *rest)
        ws = np.arange(self.nw) if m.full else np.flatnonzero(m.wany)
        r = state["round"]
        if sid in vote:
            n[r, ws] += 1
        if self.replaying:
            return
        if sid in poll:
            polling[ws] = True
            t0[r, ws] = np.fmin(t0[r, ws], self.last[ws])
        elif sid in bar:
            t1[r, ws] = self.last[ws]
            state["round"] += 1
        elif sid in stg:
            writers[ws] = True
            t3[r - 1, ws] = np.fmax(t3[r - 1, ws], self.last[ws])

    tm._Timing._instr = instr
    try:
        res = simulate(mb.kernel, mb.inputs, spec, l2_warm=True)
    finally:
        tm._Timing._instr = original
    if not mb.verify_result(res.globals):
        raise AssertionError(f"{key}: the simulator's values fail the check")
    ns = 1e9 / spec.clock_hz
    cw = (mb.kernel.grid, mb.kernel.block // 32)
    keep = slice(2, rounds - 1)

    def grid(x):
        return x[keep].reshape(-1, *cw)
    first = np.nanmin(t0[keep], axis=1)            # the round's first poll issue, any warp
    t0s = np.where(np.isnan(t0[keep]), first[:, None], t0[keep])
    args = (t0s.reshape(-1, *cw) * ns, grid(t1) * ns, grid(n), grid(t3) * ns,
            polling.reshape(cw), writers.reshape(cw))
    out = summary(*args)
    out["first_poll_by_lag"] = first_poll_by_lag(args[0], args[2], args[3], *args[4:], key)
    return {"summary": out, "polling": polling.reshape(cw).tolist(),
            "writers": writers.reshape(cw).tolist()}


def measure(out: str, argv: list) -> dict:
    import numpy as np

    from gpusim.backends.cupy_backend import Runner
    from gpusim.measurements import spec_name_for_gpu
    from gpusim.specs import load_spec
    from measurements.campaign import provenance
    from measurements.probe import ClockSampler, save_record

    runner = Runner()
    prov = provenance(argv)
    spec = load_spec(spec_name_for_gpu(prov["gpu_name"]))
    clocks = ClockSampler()
    rec = {"format_version": 1, "provenance": prov, "rounds": ROUNDS, "fields": list(FIELDS),
           "spec": spec.name, "results": {}}
    t0 = time.time()
    for key, *_ in EXPERIMENTS:
        try:
            roles = simulate_ring(spec, key, rounds=6)      # who polls and who writes
            polling, writers = (np.array(roles[k]) for k in ("polling", "writers"))
            r = stamp_ring(runner, key)
            ts = r.pop("ts")
            summ = gpu_summary(ts, polling, writers, key)
            if os.environ.get("POLL_COUNT_RAW"):     # the stamps, for a later look
                np.savez_compressed(os.path.join(out, f"poll_count_raw_{key}.npz"), ts=ts)
            rec["results"][key] = {"status": "ok", **r, "summary": summ}
            print(key, json.dumps(summ, default=lambda x: round(x, 2)),
                  f"plain {np.median(r['plain']['launch_s']) * 1e6:.1f} us, stamped "
                  f"{np.median(r['stamped']['launch_s']) * 1e6:.1f} us", flush=True)
        except Exception as exc:     # record and go on
            rec["results"][key] = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
            print(f"{key}: FAILED {type(exc).__name__}: {exc}", flush=True)
    clocks.stop(prov)
    rec["timing_s"] = time.time() - t0
    save_record(os.path.join(out, "poll_count.json"), rec)
    return rec


# ``POLL_COUNT_WHATIF=1 ... --simulate FILE``: the rings again with a store seen by a poll as
# soon as it reaches L2 (no pollers' delay, no visibility delay), the rule the lag curves of
# ``poll_count_lag.json`` point to; written to the record's ``simulated_seen_on_arrival``
WHATIF = {"l2_poll_sharer_cycles": 0.0, "l2_store_visibility_cycles": 0}
WHATIF_SECTION = "simulated_seen_on_arrival"


KERNEL_PHASES = ("per_step_ns", "setup_ns", "poll_ns", "staging_wait_ns", "compute_ns")
GPU_PHASES = {"per_step_ns": "step_ns", "setup_ns": "setup_ns", "poll_ns": "poll_ns",
              "staging_wait_ns": "staging_wait_ns", "compute_ns": "compute_ns"}


def kernels_into(path: str) -> None:
    """``POLL_COUNT_KERNELS=1 ... --simulate FILE``: the Lamport kernel on the 14 layers of
    ``lamport_trace_layers.json`` (its H200 record beside FILE), stamped as that probe stamps
    it (:func:`measurements.lamport_trace.simulate_layer`), with today's spec and under
    :data:`WHATIF`, normal and prefilled, next to the GPU's stamped medians (normal and
    ``inplace``); written to FILE's section ``kernels``."""
    import dataclasses

    from gpusim.specs import load_spec
    from measurements.lamport_trace import simulate_layer
    from measurements.probe import save_record

    with open(path) as f:
        rec = json.load(f)
    with open(os.path.join(os.path.dirname(path), "lamport_trace_layers.json")) as f:
        trace = json.load(f)
    spec = load_spec(rec["spec"])
    specs = {"today": spec, "seen_on_arrival": dataclasses.replace(spec, **WHATIF)}
    out = {"source": "lamport_trace_layers.json", "overrides": WHATIF, "layers": {}}
    for key, r in trace["results"].items():
        row = {"gpu": {m: {k: r[g]["summary"][v] for k, v in GPU_PHASES.items()}
                       for m, g in (("normal", "normal"), ("no_wait", "inplace"))}}
        for name, sp in specs.items():
            s = simulate_layer(sp, r["hidden"], r["batch"], r["density"])
            row[name] = {m: {k: s[g][k] for k in KERNEL_PHASES}
                         for m, g in (("normal", "normal"), ("no_wait", "prefilled"))}
        out["layers"][key] = row
        print(key, json.dumps({k: v["normal"]["per_step_ns"] for k, v in row.items()},
                              default=lambda x: round(x)), flush=True)
    rec["kernels"] = out
    save_record(path, rec)


def simulate_into(path: str) -> None:
    """Add the simulator's summaries (:func:`simulate_ring`) to the record at ``path`` (with
    ``POLL_COUNT_WHATIF=1``: under :data:`WHATIF`, in the section :data:`WHATIF_SECTION`; with
    ``POLL_COUNT_KERNELS=1``: :func:`kernels_into`)."""
    from measurements.probe import add_simulated

    def results(spec, rec):
        out = {}
        for key in rec["results"]:
            out[key] = simulate_ring(spec, key)["summary"]
            print(key, json.dumps(out[key], default=lambda x: round(x, 2)), flush=True)
        return out
    if os.environ.get("POLL_COUNT_KERNELS"):
        kernels_into(path)
        return
    if os.environ.get("POLL_COUNT_WHATIF"):
        add_simulated(path, results, gpu=None, section=WHATIF_SECTION, overrides=WHATIF,
                      rounds=SIM_ROUNDS)
    else:
        add_simulated(path, results, gpu=None, rounds=SIM_ROUNDS)


def main(argv: list | None = None) -> int:
    from measurements.probe import probe_main
    return probe_main(argv, __doc__, "measurements/poll_count.py", measure, simulate_into)


if __name__ == "__main__":
    raise SystemExit(main())
