"""A stable text form of the IR, used by tests (golden files), notebooks and ``gpusim ir``."""

from __future__ import annotations

from .ir import If, Instr, Kernel, Loop, While


def format_instr(instr: Instr) -> str:
    attrs = "".join(f".{v}" if k in ("cmp", "kind") else f".{32 * int(v)}" if k == "width" else
                    f" {k}={v}" for k, v in instr.attrs)
    dsts = ", ".join(str(d) for d in instr.dsts)
    srcs = ", ".join(str(s) for s in instr.srcs)
    lhs = f"{dsts} = " if dsts else ""
    return f"{lhs}{instr.op}{attrs} {srcs}".rstrip()


def _lines(body: tuple, depth: int):
    pad = "  " * depth
    for s in body:
        if isinstance(s, Instr):
            yield pad + format_instr(s)
        elif isinstance(s, Loop):
            step = f" step {s.step}" if s.step != 1 else ""
            tag = "loop" if s.kind == "for" else f"loop.{s.kind}"
            yield f"{pad}{tag} %{s.var.name} = {s.start} .. {s.stop}{step} {{"
            yield from _lines(s.body, depth + 1)
            yield pad + "}"
        elif isinstance(s, While):
            yield f"{pad}do {s.label} (spin_limit {s.spin_limit}) {{"
            yield from _lines(s.body, depth + 1)
            yield f"{pad}}} while {s.cond}"
        elif isinstance(s, If):
            yield f"{pad}if {s.cond} {{"
            yield from _lines(s.then, depth + 1)
            if s.orelse:
                yield pad + "} else {"
                yield from _lines(s.orelse, depth + 1)
            yield pad + "}"
        else:
            yield f"{pad}<unstructured {s!r}>"


def format_kernel(kernel: Kernel) -> str:
    """The whole kernel as text: header, buffers, registers, then the body."""
    out = [f"kernel {kernel.name} (grid={kernel.grid}, block={kernel.block})"]
    for k, v in kernel.meta:
        out.append(f"  meta {k} = {v}")
    for b in kernel.buffers:
        role = f" {b.role}" if b.space == "global" else ""
        out.append(f"  {b.space}{role} {b.dtype} {b.name}[{b.size}]")
    for r in kernel.regs:
        size = f"[{r.size}]" if r.size > 1 else ""
        out.append(f"  reg {r.dtype} %{r.name}{size}")
    out.append("{")
    out.extend(_lines(kernel.body, 1))
    out.append("}")
    return "\n".join(out) + "\n"
