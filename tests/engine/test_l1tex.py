"""The SM's L1TEX stages (``gpusim/engine/smem.py``) against the recorded gather measurements
(``measurements/h100/gather.json``, ``measurements/gather.py``; ``measurements/h100/csr_mech.json``
and ``measurements/h200/csr_mech.json``, ``measurements/csr_mech.py``): the tag stage counts
distinct 128-byte lines, the data stage the bank wavefronts of the lanes' words (shared memory's
bank rule at the load's width: one phase of 32 lanes for 32-bit loads, four of 8 for 128-bit
ones), one per cycle. ``gather.json``'s lanes share banks across lines (wavefronts = lines); the
``cmech_*`` family spreads them over banks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from gpusim.calibrate import simulated_cycles_per_op
from gpusim.engine import simulate
from gpusim.engine.smem import SharedPipe, lines
from gpusim.specs import load_spec
from kernels_ir.errors import InputError
from kernels_ir.kernels import microbench as mb
from measurements import csr_mech
from measurements.gather import NAMES, SIM_SIZES

RECORD = Path(__file__).resolve().parents[2] / "measurements" / "h100" / "gather.json"
CSR_RECORD = RECORD.with_name("csr_mech.json")
H200_CSR_RECORD = RECORD.parents[1] / "h200" / "csr_mech.json"
H100 = load_spec("h100")
H200 = load_spec("h200")
LINES = {"gather_l1_8_s4": 8, "gather_l1_32_w4": 32, "gather_l1_8_s4_w4": 8,
         **{f"gather_l1_{k}": k for k in (1, 2, 4, 8, 16, 32)},
         **{f"gather_l2_{k}": k for k in (1, 8, 32)}}


@pytest.fixture(scope="module")
def record():
    return json.loads(RECORD.read_text())


@pytest.fixture(scope="module")
def csr_record():
    from measurements.probe import read_record

    return read_record(str(CSR_RECORD))


def per_request(m: dict, metric: str) -> float:
    return m[metric] / m["l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum"]


def simulated_data_wavefronts(name: str, monkeypatch) -> float:
    """Data-stage wavefronts per global load request of benchmark ``name`` in the simulator (a
    small grid at the Nsight pass's 16 rounds, so the one-off loads weigh the same)."""
    units = []
    real = SharedPipe.global_returns

    def spy(self, done, warps, sm, wavefronts):
        units.append(np.asarray(wavefronts).copy())
        return real(self, done, warps, sm, wavefronts)

    monkeypatch.setattr(SharedPipe, "global_returns", spy)
    m = mb.build(name, 16, ctas=2, threads=64)
    assert m.verify_result(simulate(m.kernel, m.inputs, H100).globals)
    monkeypatch.undo()
    units = np.concatenate(units)
    return float(units.sum() / units.size)


def test_record_has_provenance_and_every_benchmark(record):
    prov = record["provenance"]
    assert "H100" in prov["gpu_name"] and prov["command"].startswith("python3 measurements/")
    assert np.median(prov["sm_clock_mhz_samples"]) == pytest.approx(1980, abs=30)
    for name in NAMES:
        r = record["results"][name]
        assert r["status"] == "ok", name
        for size in r["sizes"].values():
            assert len(size["t"]["raw"]) >= 5 and "cuda_sha256" in size["kernel"]


def test_nsight_counts_one_tag_access_per_line(record, csr_record):
    for name, rec in record["ncu"]["cases"].items():
        m = rec["metrics"]
        assert per_request(m, "l1tex__t_set_accesses_pipe_lsu_mem_global_op_ld.sum") == \
            pytest.approx(LINES[name], abs=0.05), name
    for name, rec in csr_record["ncu"]["cases"].items():   # one-off loads of one line: < 32
        lines_ = 8 if name == "cmech_spread_8" else 32
        assert per_request(rec["metrics"], "l1tex__t_set_accesses_pipe_lsu_mem_global_op_ld.sum") \
            == pytest.approx(lines_, rel=0.02), name


# the data stage's wavefronts per request, Nsight against the simulator's rule; the L1-hit
# benchmarks of csr_mech.json exceed the rule by up to 0.3 (their first lap's cold misses)
DATA_WF = "l1tex__data_pipe_lsu_wavefronts_mem_lgds.sum"


@pytest.mark.parametrize("name", ["gather_l1_8", "gather_l1_8_s4", "gather_l1_32_w4",
                                  "gather_l1_8_s4_w4", "gather_l2_8"])
def test_data_stage_wavefronts_of_the_gathers(record, name, monkeypatch):
    m = record["ncu"]["cases"][name]["metrics"]
    assert per_request(m, DATA_WF) == pytest.approx(LINES[name], abs=0.05)
    # gather_l1_8_s4_w4: 16-byte lanes, 8 lines x 4 chunk positions: 8 wavefronts, not the 32 of
    # shared memory's quarter-warp phases (the warp is one phase for a global load)
    assert simulated_data_wavefronts(name, monkeypatch) == pytest.approx(LINES[name], abs=0.05)


@pytest.mark.parametrize("name", ["cmech_same_32", "cmech_spread_32", "cmech_spread4_32",
                                  "cmech_rand_32", "cmech_spread_8", "cmech_spread_32_w4",
                                  "cmech_reuse_rand_32", "cmech_miss_same_32"])
def test_data_stage_wavefronts_are_the_bank_rule(csr_record, name, monkeypatch):
    nsight = per_request(csr_record["ncu"]["cases"][name]["metrics"], DATA_WF)
    sim = simulated_data_wavefronts(name, monkeypatch)
    assert sim - 0.05 <= nsight <= sim + 0.35, (name, nsight, sim)


def test_missed_loads_pass_the_data_stage_in_pieces_which_is_not_modelled(csr_record,
                                                                          monkeypatch):
    """The known gap: random words that miss L1 cost Nsight 15 wavefronts a request, the rule 3
    (word 0 for all lanes, cmech_miss_same_32, is the rule's 32 either way)."""
    nsight = per_request(csr_record["ncu"]["cases"]["cmech_miss_rand_32"]["metrics"], DATA_WF)
    sim = simulated_data_wavefronts("cmech_miss_rand_32", monkeypatch)
    assert sim == pytest.approx(3.0, abs=0.1) and nsight > 4 * sim


def test_cost_is_one_cycle_per_wavefront_and_the_spec_rate_is_its_fit(record):
    res = record["results"]
    l1 = [n for n in NAMES if n.startswith("gather_l1_") and LINES[n] >= 4]
    for n in l1:   # sectors (8 x 4) and bytes (16 a lane) do not add
        assert res[n]["per_sm_cycles"] == pytest.approx(LINES[n], rel=0.16), n
    x = np.array([LINES[n] for n in l1], float)
    y = np.array([res[n]["per_sm_cycles"] for n in l1])
    slope = float(x @ y / (x @ x))        # cycles per line (= wavefront), through the origin
    assert 1.0 / slope == pytest.approx(H100.smem_wavefronts_per_cycle, rel=0.05)


def test_simulator_gives_the_measured_l1_cost_and_the_record_is_todays(record):
    sim = record["simulated"]["results"]
    for n in NAMES:
        if n.startswith("gather_l1_") and LINES[n] >= 4:
            assert sim[n]["per_sm_cycles"] == pytest.approx(
                record["results"][n]["per_sm_cycles"], rel=0.16), n
    # L2-bound loads: the per-SM request limit (l2_request_cycles_per_sm) is their fit
    for n in ("gather_l2_8", "gather_l2_32"):
        assert sim[n]["per_sm_cycles"] == pytest.approx(record["results"][n]["per_sm_cycles"],
                                                        rel=0.1), n
    today = simulated_cycles_per_op(H100, "gather_l1_8_s4", SIM_SIZES, {}) * H100.sm_count
    assert today == pytest.approx(sim["gather_l1_8_s4"]["per_sm_cycles"], rel=1e-9)


def test_lines_counts_distinct_lines_of_active_lanes():
    flat = np.array([np.arange(32),                       # one line
                     np.arange(32) * 32,                  # 32 lines
                     (np.arange(32) % 4) * 32 + 8 * (np.arange(32) // 4 % 4)])  # 4 lines
    act = np.ones(flat.shape, bool)
    assert lines(flat, act).tolist() == [1, 32, 4]
    act[1, 16:] = False
    act[2] = False
    assert lines(flat, act).tolist() == [1, 16, 0]


def test_gather_benchmark_values_and_bad_sizes():
    m = mb.build("gather_l1_8_s4_w4", 3, ctas=2, threads=128)
    assert m.verify_result(simulate(m.kernel, m.inputs, H100).globals)
    with pytest.raises(InputError, match="k=3"):
        mb.gather(k=3)
    with pytest.raises(InputError, match="width=2"):
        mb.gather(width=2)
    with pytest.raises(InputError, match="path='l3'"):
        mb.gather(path="l3")


CMECH_HITS = ["cmech_same_32", "cmech_spread_32", "cmech_spread4_32", "cmech_rand_32",
              "cmech_spread_8", "cmech_spread_32_w4", "gather_l1_32_w4", "cmech_reuse_same_32",
              "cmech_reuse_rand_32"]


def test_simulator_reproduces_the_cmech_family(csr_record):
    """L1-hit gathers within 16% (the gather family's tolerance) of the GPU; the same/spread,
    same/random, 16-byte and reuse ratios within 12% (recorded: 3% to 10.4%; under the old
    one-cycle-per-line rule every ratio but the last was 1 against 3.6-4.3). The simulator
    prices 32 lines in spread banks at the tag stage's 8 cycles (GPU 7.7-9.2), 32 words in one
    bank at 32 (GPU 32.2-33.1)."""
    sim = {n: r["per_sm_cycles"] for n, r in csr_record["simulated"]["results"].items()}
    gpu = {n: r["per_sm_cycles"] for n, r in csr_record["results"].items()}
    assert set(sim) == set(csr_mech.NAMES) - set(csr_mech.WIDE)    # the H100's record
    for n in CMECH_HITS:
        assert sim[n] == pytest.approx(gpu[n], rel=0.16), n
    for num, den in [("cmech_same_32", "cmech_spread_32"), ("cmech_same_32", "cmech_rand_32"),
                     ("gather_l1_32_w4", "cmech_spread_32_w4"),
                     ("cmech_reuse_same_32", "cmech_reuse_rand_32"),
                     ("cmech_spread_32", "cmech_spread_8")]:
        assert sim[num] / sim[den] == pytest.approx(gpu[num] / gpu[den], rel=0.12), (num, den)


@pytest.mark.xfail(strict=True, reason="known gap since the L2 contention groups: the "
                   "16 KiB table lies in 20 groups and the engine's groups (0.49 cycles a "
                   "request) make gather_l2_32 52.6 cycles a load (GPU 46.0, +14%) and the "
                   "word-0 misses 52.6 (GPU 36.4, +45%); the GPU serves these gathers faster "
                   "than its lockstep probes allow (measurements/README.md)")
def test_l1_misses_are_bound_by_the_per_sm_l2_requests(csr_record):
    """Loads that go to L2 leave each SM at most one request per l2_request_cycles_per_sm
    (the least-squares fit over gather_l2_8/32 and the two cmech_miss benchmarks): L1 bypassed
    (gather_l2_32) within 10%, the misses within 35%. The remaining gap: the GPU's random-word
    misses cost 1.6 times its word-0 misses (58.9 against 36.4 cycles; the data stage in
    pieces), the simulator prices both alike (one unit per sector request)."""
    sim = {n: r["per_sm_cycles"] for n, r in csr_record["simulated"]["results"].items()}
    gpu = {n: r["per_sm_cycles"] for n, r in csr_record["results"].items()}
    assert sim["gather_l2_32"] == pytest.approx(gpu["gather_l2_32"], rel=0.1)
    for n in ("cmech_miss_rand_32", "cmech_miss_same_32"):
        assert sim[n] == pytest.approx(gpu[n], rel=0.35), n
    assert gpu["cmech_miss_rand_32"] > 1.5 * gpu["cmech_miss_same_32"]
    assert sim["cmech_miss_rand_32"] == pytest.approx(sim["cmech_miss_same_32"], rel=0.05)


@pytest.mark.slow
def test_the_cmech_record_is_todays(csr_record):
    today = simulated_cycles_per_op(H100, "cmech_rand_32", csr_mech.SIM_SIZES, {}) * H100.sm_count
    assert today == pytest.approx(
        csr_record["simulated"]["results"]["cmech_rand_32"]["per_sm_cycles"], rel=1e-9)


@pytest.fixture(scope="module")
def h200_csr_record():
    from measurements.probe import read_record

    return read_record(str(H200_CSR_RECORD))


DATA_WF_H200 = "l1tex__data_pipe_lsu_wavefronts.sum"
WRITEBACK = "l1tex__lsu_writeback_active.sum"


def test_h200_record_has_every_benchmark_and_its_simulation(h200_csr_record):
    rec = h200_csr_record
    assert "H200" in rec["provenance"]["gpu_name"]
    assert set(rec["results"]) == set(csr_mech.NAMES)
    assert all(r["status"] == "ok" for r in rec["results"].values())
    assert set(rec["ncu"]["cases"]) == set(csr_mech.NAMES)
    assert rec["simulated"]["spec"] == "h200" and set(rec["simulated"]["results"]) == set(
        csr_mech.NAMES)


def test_wide_gathers_that_use_every_word_pass_the_data_stage_in_quarter_warp_phases(
        h200_csr_record, monkeypatch):
    """The 128-bit gathers at random 16-byte chunks (one load a lane, and the batch-8 pair of
    loads a 32-byte sector) cost Nsight's data stage shared memory's 128-bit rule (four phases of
    8 lanes: 10 and 11 wavefronts, recorded 10.8 and 11.2; the simulator's small grid 9.9 and
    10.9), not the warp as one phase of their first words (7 and 10), which this module's rule was
    before. The excess, up to 1, is the first lap's cold misses."""
    from kernels_ir.banks import wavefronts

    cases = h200_csr_record["ncu"]["cases"]
    for name in ("cmech_rand_32_w4", "cmech_pair_rand_32_w4"):
        nsight = per_request(cases[name]["metrics"], DATA_WF_H200)
        sim = simulated_data_wavefronts(name, monkeypatch)
        assert sim - 0.05 <= nsight <= sim + 1.0, (name, nsight, sim)
    words = csr_mech_lane_words()
    one_phase = float(wavefronts(words, 1)[0])
    assert one_phase == 7 and per_request(cases["cmech_rand_32_w4"]["metrics"],
                                          DATA_WF_H200) > one_phase + 3


def csr_mech_lane_words() -> np.ndarray:
    """The first words of ``cmech_rand_32_w4``'s lanes (each on a line of its own)."""
    from kernels_ir.kernels.microbench.csr_gathers import lane_words

    return ((np.arange(32) * 37 % 128) * 32 + lane_words("rand", 4))[None, :]


def test_the_older_16_byte_benchmarks_were_32_bit_loads(h200_csr_record):
    """``cmech_spread_32_w4`` and ``gather_l1_32_w4`` leave three words of each load unused, so
    the compiler narrows them to 32-bit loads: their LSU writeback is about one cycle a request,
    as for the 32-bit gathers, against 4.3-4.7 for the 128-bit ones that use every word (512
    bytes at 128 a cycle). So they measured the 32-bit rule, and the one-phase rule they
    supported says nothing of 128-bit loads."""
    cases = h200_csr_record["ncu"]["cases"]
    wb = {n: per_request(c["metrics"], WRITEBACK) for n, c in cases.items()}
    for n in ("cmech_spread_32_w4", "gather_l1_32_w4", "cmech_rand_32", "cmech_same_32"):
        assert wb[n] < 1.5, (n, wb[n])
    for n in ("cmech_rand_32_w4", "cmech_pair_rand_32_w4"):
        assert 4.0 < wb[n] < 5.0, (n, wb[n])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
def test_the_compiler_narrows_unused_128_bit_words_and_keeps_the_used_ones(tmp_path):
    """The PTX of the generated CUDA: ``cmech_spread_32_w4`` loads 32 bits, the random-chunk
    128-bit benchmarks ``v4`` (the same NVVM narrowing the record's writeback shows)."""
    import re
    import subprocess

    from gpusim.backends.cupy_backend import generate

    def ptx_loads(name):
        cu = tmp_path / f"{name}.cu"
        cu.write_text(generate(mb.build(name, 16).kernel).code)
        out = tmp_path / f"{name}.ptx"
        subprocess.run([shutil.which("nvcc"), "-arch=sm_90", "-ptx", "-o", str(out), str(cu)],
                       check=True, capture_output=True)
        return set(re.findall(r"ld\.global\.nc\.(\w+(?:\.\w+)?)", out.read_text()))

    assert ptx_loads("cmech_spread_32_w4") == {"u32"}
    for name in ("cmech_rand_32_w4", "cmech_pair_rand_32_w4"):
        assert "v4.u32" in ptx_loads(name), name


def test_h200_simulator_prices_the_wide_hits_as_measured(h200_csr_record):
    """Cycles per warp load (per pair) per SM: the 128-bit random-chunk hits within 10% of the
    H200 (recorded: 10.2 and 22.7; simulated 10.0 and 22.6, with the one-phase rule 7.7 and
    20.7), and the record's simulated values are today's."""
    sim = h200_csr_record["simulated"]["results"]
    gpu = h200_csr_record["results"]
    for n in ("cmech_rand_32_w4", "cmech_pair_rand_32_w4"):
        assert sim[n]["per_sm_cycles"] == pytest.approx(gpu[n]["per_sm_cycles"], rel=0.1), n
    today = simulated_cycles_per_op(H200, "cmech_rand_32_w4", csr_mech.SIM_SIZES, {}) \
        * H200.sm_count
    assert today == pytest.approx(sim["cmech_rand_32_w4"]["per_sm_cycles"], rel=1e-9)


def test_h200_misses_of_the_batch8_pair_are_a_known_gap(h200_csr_record):
    """The pair that misses L1 (the CSR kernel's batch-8 gathers of an h not yet in L1) costs
    the H200 67.5 cycles a pair per SM; the simulator gives 49.9: its second load waits for
    the first one's fills, while on the GPU it asks L2 again for about a quarter of them (L2
    sectors 40.5 a pair for 32 distinct), and the data stage takes the misses in pieces (21
    wavefronts a load, the rule 11)."""
    sim = h200_csr_record["simulated"]["results"]["cmech_miss_pair_rand_32_w4"]["per_sm_cycles"]
    gpu = h200_csr_record["results"]["cmech_miss_pair_rand_32_w4"]["per_sm_cycles"]
    assert gpu == pytest.approx(67.5, rel=0.02) and sim < 0.75 * gpu
    m = h200_csr_record["ncu"]["cases"]["cmech_miss_pair_rand_32_w4"]["metrics"]
    l2_per_pair = 2 * per_request(m, "lts__t_sectors_srcunit_tex_op_read.sum")
    assert 38 < l2_per_pair < 43


def test_the_simulator_narrows_the_loads_whose_later_words_are_dead():
    """``gpusim.engine.lowering.narrowed_loads``: the three benchmarks whose 128-bit loads keep
    only their first word load 32 bits in the simulator, as in their PTX; the random-chunk
    128-bit benchmarks and the CSR kernel at every batch keep their width."""
    from gpusim.engine.lowering import narrowed_loads
    from measurements.csr_l1 import step

    for name in ("cmech_spread_32_w4", "gather_l1_32_w4", "gather_l1_8_s4_w4"):
        got = narrowed_loads(mb.build(name, 4).kernel)
        assert len(got) == 4 and set(got.values()) == {1}, name
    for name in ("cmech_rand_32_w4", "cmech_pair_rand_32_w4", "cmech_rand_32"):
        assert narrowed_loads(mb.build(name, 4).kernel) == {}, name
    for batch in (1, 2, 4, 8):
        assert narrowed_loads(step(1024, batch, 0.05, 1).kernel) == {}, batch


def test_the_h200_gather_record_and_its_l2_gap():
    """``h200/gather.json.xz`` (``gather.py`` on an H200, simulated on the H200's spec): every
    benchmark ran with its raw repeats; the L1 hits cost a cycle a line from 8 lines up (within
    16%, the simulator too; at 4 lines the H200 3.3, the simulator 4.0), and the L1-bypassing
    gathers are the known gap the READMEs
    quote: the GPU 9.2 / 36.2 cycles a warp load per SM at 8 / 32 lines, the simulator 13.2 /
    54.4 (its L2 contention groups bind; ``h200/l2_gather_sweep.json``; 13.0 / 58.8 before a
    line's sharers were counted at once)."""
    from measurements.probe import read_record

    rec = read_record(str(RECORD.parents[1] / "h200" / "gather.json"))
    assert "H200" in rec["provenance"]["gpu_name"]
    assert rec["simulated"]["spec"] == "h200"
    gpu = {n: r["per_sm_cycles"] for n, r in rec["results"].items()}
    sim = {n: r["per_sm_cycles"] for n, r in rec["simulated"]["results"].items()}
    for name in NAMES:
        r = rec["results"][name]
        assert r["status"] == "ok" and all(len(s["t"]["raw"]) >= 5 for s in r["sizes"].values())
        if name.startswith("gather_l1_") and LINES[name] >= 8:
            assert gpu[name] == pytest.approx(LINES[name], rel=0.16), name
            assert sim[name] == pytest.approx(gpu[name], rel=0.16), name
    assert (round(gpu["gather_l1_4"], 1), round(sim["gather_l1_4"], 1)) == (3.3, 4.0)
    assert (round(gpu["gather_l2_8"], 1), round(gpu["gather_l2_32"], 1)) == (9.2, 36.2)
    assert (round(sim["gather_l2_8"], 1), round(sim["gather_l2_32"], 1)) == (13.2, 54.4)
