"""Reading the SASS of generated kernels: does the GPU issue the loads the way the IR says?

The simulator issues a warp's instructions in IR order. The GPU issues the order ptxas chose, also
in order per warp: an instruction that waits for a load's result stalls every later instruction
of that warp, loads included. So when ptxas puts a consumer of load 1 before load 2, the two
loads no longer overlap, however the CUDA source was written. This module finds exactly that for
the 128-bit global loads of the h staging (``_stage_h``): the ``LDG.E.128`` of one
straight-line stretch of code form a group, and any instruction between a group's first and
last load that reads an earlier member's result is reported.

``find_cuobjdump()`` looks on PATH, then in the ``nvidia-cuda-cuobjdump`` wheel (with
``nvidia-cuda-nvdisasm``, which it runs, a test dependency: nvcc alone cannot disassemble).
``parse`` takes SASS text as cuobjdump prints it or as Nsight Compute's source page lists it
(one instruction per line or entry).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")
_REG = re.compile(r"\bR(\d+)(\.64)?\b")
_WIDE_LOAD = re.compile(r"^LDG\.E\.128\b")


@dataclass(frozen=True)
class SassInstr:
    """One SASS instruction: ``opcode`` with modifiers, ``operands`` as printed, its predicate
    (``@!P0``) if any."""

    index: int
    opcode: str
    operands: tuple[str, ...]
    pred: str = ""

    @property
    def text(self) -> str:
        return " ".join(filter(None, (self.pred, self.opcode, ", ".join(self.operands))))

    def writes(self) -> set[int]:
        """Registers the instruction writes (its first operand, for non-store opcodes)."""
        if not self.operands or self.opcode.startswith(("ST", "RED", "BRA", "BAR", "ISETP",
                                                         "FSETP", "VOTE", "PLOP3")):
            return set()
        return _regs(self.operands[0], self.opcode)

    def reads(self) -> set[int]:
        """Registers read: addresses at their own width; a store's data at the store's width."""
        store = self.opcode.startswith(("ST", "RED"))
        out: set[int] = set()
        for o in self.operands if store else self.operands[1:]:
            out |= _regs(o, self.opcode if store and not o.startswith("[") else "")
        return out


def _regs(operand: str, opcode: str) -> set[int]:
    out: set[int] = set()
    for m in _REG.finditer(operand):
        r = int(m.group(1))
        width = 2 if m.group(2) else 1
        if opcode and ".128" in opcode:
            width = 4
        elif opcode and ".64" in opcode:
            width = 2
        out |= set(range(r, r + width))
    return out


def parse(lines) -> list[SassInstr]:
    """SASS instructions from cuobjdump text (a string) or an iterable of instruction strings."""
    if isinstance(lines, str):
        found = _LINE.findall(lines)
        lines = found if found else lines.splitlines()
    out = []
    for raw in lines:
        s = raw.strip().rstrip(";").strip()
        if not s or s.startswith(("/*", ".", "//")):
            continue
        pred = ""
        if s.startswith("@"):
            pred, _, s = s.partition(" ")
            s = s.strip()
        op, _, rest = s.partition(" ")
        operands = tuple(o.strip() for o in rest.split(",") if o.strip()) if rest else ()
        out.append(SassInstr(len(out), op, operands, pred))
    return out


_ENCODED = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;\s*/\* (0x[0-9a-f]{16}) \*/\s*\n"
                      r"\s*/\* (0x[0-9a-f]{16}) \*/")


def stall_counts(text: str) -> list[tuple[SassInstr, int]]:
    """Each instruction of cuobjdump ``-sass`` text with its stall count: the cycles ptxas makes
    the warp wait before its next instruction, bits 41-44 of the instruction's second 64-bit
    word (the control bits of Volta and later, Jia et al. 2018: stall, yield, write and read
    barrier, wait mask, reuse)."""
    out = []
    for k, (txt, _lo, hi) in enumerate(_ENCODED.findall(text)):
        ins = parse([txt])[0]
        out.append((SassInstr(k, ins.opcode, ins.operands, ins.pred), (int(hi, 16) >> 41) & 0xF))
    return out


_BRANCHES = ("BRA", "BRX", "JMP", "BSYNC", "BSSY", "EXIT", "RET", "CALL", "WARPSYNC", "BAR")


def wide_load_groups(instrs: list[SassInstr]) -> list[list[SassInstr]]:
    """Groups of 128-bit global loads (``LDG.E.128*``): those of one straight-line stretch of
    code (no branch, reconvergence or barrier between them), in program order. Predicated
    loads stay in the stretch. A group has at least two loads. (In these kernels the only
    128-bit global loads are the h staging's, so a stretch holds one group's chunks.)"""
    groups: list[list[SassInstr]] = []
    cur: list[SassInstr] = []
    for ins in instrs:
        if ins.opcode.startswith(_BRANCHES):
            _close(groups, cur)
            cur = []
        elif _WIDE_LOAD.match(ins.opcode):
            cur.append(ins)
    _close(groups, cur)
    return groups


def _close(groups, g) -> None:
    if len(g) > 1:
        groups.append(g)


def interleaved_loads(instrs: list[SassInstr]) -> list[dict]:
    """For every wide-load group, the instructions between its first and last load that read the
    result of an earlier load of the group (each one makes the in-order warp wait a full L2
    round trip before it can issue the next load). Empty: every group's loads are in flight
    together."""
    bad = []
    for g in wide_load_groups(instrs):
        for k, later in enumerate(g[1:], 1):
            for ld in g[:k]:
                for ins in instrs[ld.index + 1:later.index]:
                    if ins.reads() & ld.writes() and ins not in g:
                        bad.append({"group_first": g[0].index, "load": later.index,
                                    "waits_for": ld.index, "consumer": ins.index,
                                    "sass": ins.text})
    return bad


def find_cuobjdump() -> str | None:
    """``cuobjdump`` on PATH, else the one the ``nvidia-cuda-cuobjdump`` wheel installs."""
    exe = shutil.which("cuobjdump")
    if exe:
        return exe
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
    except ImportError:
        return None
    for root in getattr(nvidia, "__path__", []):
        for cand in sorted(Path(root).glob("cu*/bin/cuobjdump")) + \
                sorted(Path(root).glob("cuda_cuobjdump/bin/cuobjdump")):
            if cand.is_file():
                return str(cand)
    return None


def disassemble(cubin: str | Path, cuobjdump: str | None = None) -> str:
    """``cuobjdump -sass`` of a cubin."""
    exe = cuobjdump or find_cuobjdump()
    if exe is None:
        raise InputError("cuobjdump not found: install the test extras (pip install -e "
                         "'.[test]' brings nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm) or "
                         "a CUDA toolkit")
    # cuobjdump runs nvdisasm: the wheels put both in one bin directory
    env = dict(os.environ, PATH=os.pathsep.join([str(Path(exe).parent),
                                                 os.environ.get("PATH", "")]))
    p = subprocess.run([exe, "-sass", str(cubin)], capture_output=True, text=True, timeout=120,
                       env=env)
    if p.returncode != 0:
        raise InputError(f"cuobjdump -sass {cubin} failed: {p.stderr.strip()[-500:]}")
    return p.stdout
