"""Pieces the measurement scripts share: timing one microbenchmark the way the campaign does
(two sizes, slope of the medians, the kernel's hashes per size, failures recorded, not raised)
the ``--out DIR`` / ``--simulate FILE`` command line of the probe scripts, and the SM clock
sampler every device record carries (``provenance["sm_clock_mhz_samples"]``)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time


class ClockSampler:
    """``nvidia-smi`` samples of the SM clock every 250 ms from construction to :meth:`stop`."""

    def __init__(self):
        self.proc = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm",
                                      "--format=csv,noheader,nounits", "-lms", "250"],
                                     stdout=subprocess.PIPE, text=True)

    def stop(self, prov: dict) -> list[int]:
        """End the sampling; the samples (MHz) go to ``prov["sm_clock_mhz_samples"]``."""
        self.proc.terminate()
        samples = [int(x) for x in self.proc.communicate(timeout=10)[0].split() if x.isdigit()]
        prov["sm_clock_mhz_samples"] = samples
        return samples


def time_microbench(runner, name: str, sizes: tuple, kw: dict | None = None, *,
                    repeats: int = 7, warmup: int = 2, label: str | None = None) -> dict:
    """Microbenchmark ``name`` (builder arguments ``kw``) timed at ``sizes`` on the GPU: the
    record of :func:`gpusim.backends.cupy_backend.run_microbench` plus every size's kernel
    hashes and ``status``; an error becomes ``{"status": "error", "error": ...}``."""
    from gpusim.backends.cupy_backend import run_microbench
    from gpusim.measurements import kernel_fingerprint
    from kernels_ir.kernels import microbench as mb

    kw = kw or {}
    label = label or name
    t0 = time.time()
    try:
        r = run_microbench(sizes, lambda s: mb.build(name, s, **kw), repeats=repeats,
                           warmup=warmup, runner=runner)
        for size in sizes:
            r["sizes"][str(size)]["kernel"] = kernel_fingerprint(mb.build(name, size, **kw).kernel)
        r["status"] = "ok"
        print(f"{label:30s} {r['per_op_s'] * 1e9:9.2f} ns/op ({time.time() - t0:.1f}s)",
              flush=True)
    except Exception as exc:  # record and go on
        r = {"status": "error", "error": f"{type(exc).__name__}: {exc}"}
        print(f"{label}: FAILED {r['error']}", flush=True)
    return r


def probe_main(argv: list | None, doc: str, script: str, measure, simulate_into) -> int:
    """``script --out DIR`` runs ``measure(DIR, argv)`` (on the GPU); ``script --simulate FILE``
    runs ``simulate_into(FILE)``."""
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out")
    ap.add_argument("--simulate")
    a = ap.parse_args(argv)
    if a.simulate:
        simulate_into(a.simulate)
    elif a.out:
        os.makedirs(a.out, exist_ok=True)
        measure(a.out, [script] + argv)
    else:
        ap.error("--out or --simulate")
    return 0
