"""One validation layer for what a user hands the instrument: command-line values, lists and
ranges, files (GPU specs, recorded measurements) and output paths.

Every check here runs *before* any work or allocation and raises :class:`InputError` with one
line that names the value and what is accepted; ``gpusim.cli.main`` prints it and exits 2. A
kernel whose values differ from the float64 reference raises :class:`ValueMismatchError`
(:func:`check_values`), which the CLI reports the same way: no command reports a wrong value as a
success.

Bounds (stated once, here):

- ``hidden`` 1..:data:`HIDDEN_MAX` for every command that builds a matrix
  (:data:`SWEEP_HIDDEN_MAX` for the closed-form sweep); ``batch`` 1..:data:`BATCH_MAX`;
  ``timesteps`` 1..:data:`TIMESTEPS_MAX`; ``seed`` 0..:data:`SEED_MAX`.
- ``density`` in [:data:`DENSITY_MIN`, 1]: the sparsest layer studied is near 1e-3; at
  1e-6 the largest accepted layer (65536 x 65536) still expects about 4300 nonzeros, while
  below it the weights' scale ``1 / sqrt(density * N)`` runs off toward float32 overflow
  (1e-300 made every weight inf).
- A generated layer at most :data:`DRAWS_MAX` weight positions (one random draw each) and
  :data:`NNZ_MAX` nonzeros.
- The input sequence of a layer (``timesteps x rows x batch`` values, with a float64 reference
  of the same shape) at most :data:`SEQUENCE_MAX` elements (0.75 GB together).
- Warps per CTA at most :data:`WARPS_PER_CTA_MAX` (1024 threads) and at most the spec's
  ``max_threads_per_cta / 32``.
- A list or range at most :data:`LIST_MAX` values, a sweep at most :data:`SWEEP_CONFIGS_MAX`
  configurations; both counted before anything is expanded, ranges in exact decimal arithmetic
  (``0.01:1.0:0.01`` is 100 values ending at 1.0).
- A spec file at most :data:`SPEC_FILE_MAX` bytes, a measurement file :data:`JSON_FILE_MAX`;
  both regular files (never a FIFO or a device), UTF-8 text.

Only the standard library is imported at module level: :mod:`gpusim.specs` (which ``models``
reads) uses the file readers here.
"""

from __future__ import annotations

import decimal
import math
import os
import stat
from decimal import Decimal
from pathlib import Path

from kernels_ir.errors import InputError, ValueMismatchError

__all__ = [
    "HIDDEN_MAX", "SWEEP_HIDDEN_MAX", "BATCH_MAX", "TIMESTEPS_MAX", "SEED_MAX", "DENSITY_MIN",
    "NNZ_MAX", "DRAWS_MAX", "SEQUENCE_MAX", "WARPS_PER_CTA_MAX", "LIST_MAX", "SWEEP_CONFIGS_MAX",
    "WORKERS_MAX", "SPEC_FILE_MAX", "JSON_FILE_MAX",
    "show", "density_value", "expand_list",
    "check_sequence", "check_nnz", "check_layer_fits", "check_output_path",
    "check_plot_backend", "check_scheduler", "read_file", "read_text", "load_json_text",
    "check_values", "require_values", "check_args",
    "Num", "Int", "Str", "Bool", "Any_", "Nullable", "OneOf", "Seq", "Map", "Obj", "check_schema",
]

HIDDEN_MAX = 1 << 16
SWEEP_HIDDEN_MAX = 1 << 20      # the sweep evaluates the closed-form model only: no matrix
BATCH_MAX = 1024
TIMESTEPS_MAX = 100_000
SEED_MAX = 2 ** 63 - 1
DENSITY_MIN = 1e-6
NNZ_MAX = 50_000_000            # nonzeros the layout/mapping tools analyse (about 3.5 GB peak)
DRAWS_MAX = 1 << 30             # weight positions of a generated layer (~18 s of drawing)
SEQUENCE_MAX = 1 << 26          # T x rows x B: x_proj float32 (256 MB) + reference float64
WARPS_PER_CTA_MAX = 32
LIST_MAX = 100_000
SWEEP_CONFIGS_MAX = 1_000_000   # about 35 s of model time on one core, ~1 GB of result rows
WORKERS_MAX = 1024
SPEC_FILE_MAX = 1 << 20         # the bundled specs are about 15 KB
JSON_FILE_MAX = 64 << 20        # the largest recorded measurement file is about 1 MB
TEXT_ARG_MAX = 100_000          # characters of one list argument


def show(value, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters, for messages that must stay one line."""
    r = repr(value)
    return r if len(r) <= limit else r[:limit - 3] + "..."


# --- single values ------------------------------------------------------------------------------

def density_value(text, name: str = "density") -> float:
    """A density in [DENSITY_MIN, 1]; 0 and values above 1 say "outside (0, 1]"."""
    try:
        value = float(text) if not isinstance(text, bool) else math.nan
    except (TypeError, ValueError):
        raise InputError(f"{name}={show(text)} is not a number") from None
    if math.isnan(value) or not 0.0 < value <= 1.0:
        raise InputError(f"{name}={value!r} is outside (0, 1]")
    if value < DENSITY_MIN:
        raise InputError(f"{name}={value!r} is below {DENSITY_MIN:g}; accepted: {DENSITY_MIN:g}"
                         f"..1 (fewer than one expected nonzero per 10^6 weights)")
    return value


# --- lists and ranges ---------------------------------------------------------------------------

def _decimal(name: str, text: str, integer: bool) -> Decimal:
    try:
        d = Decimal(text.strip())
    except (decimal.InvalidOperation, ValueError):
        raise InputError(f"{name}={show(text)} is not a number") from None
    if not d.is_finite():
        raise InputError(f"{name}={show(text)} is not a finite number")
    if integer and d != d.to_integral_value():
        raise InputError(f"{name}={show(text)} is not an integer")
    return d


def _in_range(name: str, d: Decimal, lo, hi, integer: bool) -> None:
    if not Decimal(repr(lo)) <= d <= Decimal(repr(hi)):
        # shown as the float it would be, or as the integer when it is short (1e999999999
        # would take a billion digits)
        shown = (repr(float(d)) if not integer else
                 str(int(d)) if d.adjusted() < 30 else show(str(d)))
        if not integer and name == "density" and not 0 < d <= 1:
            raise InputError(f"density={shown} is outside (0, 1]")
        rng = f"{lo}..{hi}" if integer else f"{lo:g}..{hi:g}"
        raise InputError(f"{name}={shown} is outside the accepted {rng}")


def expand_list(name: str, text: str, *, integer: bool, lo, hi, max_count: int = LIST_MAX
                ) -> list:
    """``a,b,c``, ``start:stop:step`` (stop included when reached) or a mix, e.g.
    ``256:1024:256,2048``. Every value must lie in [lo, hi]; the count is computed (exactly, in
    decimal) before anything is expanded and may not exceed ``max_count``; ``0.01:1.0:0.01`` is
    the 100 values 0.01, 0.02, ..., 1.0 (each the float nearest the decimal value)."""
    if not isinstance(text, str) or len(text) > TEXT_ARG_MAX:
        raise InputError(f"{name}: a list of at most {TEXT_ARG_MAX} characters is accepted")
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > max_count:
        raise InputError(f"{name}: {len(parts)} values; accepted: at most {max_count}")
    items: list[tuple[Decimal, Decimal, int]] = []
    total = 0
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        ctx.traps[decimal.Inexact] = False
        for part in parts:
            if not part:
                raise InputError(f"{name}={show(text)} has an empty item; accepted: a list "
                                 f"'a,b,c' or a range 'start:stop:step'")
            if ":" not in part:
                d = _decimal(name, part, integer)
                _in_range(name, d, lo, hi, integer)
                items.append((d, Decimal(0), 1))
                total += 1
            else:
                bits = part.split(":")
                if len(bits) != 3:
                    raise InputError(f"{name}={show(part)} is not a list 'a,b,c' or a range "
                                     f"'start:stop:step'")
                a, b, s = (_decimal(name, x, integer) for x in bits)
                _in_range(name, a, lo, hi, integer)
                _in_range(name, b, lo, hi, integer)
                if s <= 0:
                    raise InputError(f"{name}={show(part)}: step {s} must be positive")
                if b < a:
                    raise InputError(f"{name}={show(part)}: stop {b} is below start {a}")
                try:
                    n = int((b - a) // s) + 1
                except (decimal.DecimalException, OverflowError):
                    n = max_count + 1
                items.append((a, s, n))
                total += n
            if total > max_count:
                raise InputError(f"{name}={show(text)} expands to more than {max_count} values "
                                 f"(at least {total}); accepted: at most {max_count}")
        values = [a + k * s for a, s, n in items for k in range(n)]
    return [int(v) for v in values] if integer else [float(v) for v in values]


# --- layers -------------------------------------------------------------------------------------

def check_sequence(hidden: int, batch: int, timesteps: int, rows: int | None = None) -> None:
    """Refuse a layer whose input sequence (``timesteps x rows x batch``) exceeds SEQUENCE_MAX
    elements, before it is allocated."""
    n = int(timesteps) * int(hidden if rows is None else rows) * int(batch)
    if n > SEQUENCE_MAX:
        raise InputError(f"timesteps={timesteps} x hidden={hidden} x batch={batch} is {n:.3g} "
                         f"input values (and as many reference values); accepted: at most "
                         f"{SEQUENCE_MAX:.3g} (fewer timesteps, e.g. --sample-steps for the "
                         f"simulator)")


def check_nnz(hidden: int, density: float, rows: int | None = None) -> None:
    """Refuse, before allocating, a matrix larger than the analysis tools handle: more than
    DRAWS_MAX weight positions (the random layer draws one number per position, whatever the
    density) or more than NNZ_MAX nonzeros."""
    positions = (hidden if rows is None else rows) * hidden
    if positions > DRAWS_MAX:
        raise InputError(f"hidden={hidden} has {positions:.3g} weight positions to draw; "
                         f"accepted: at most {DRAWS_MAX:.3g} (hidden <= "
                         f"{math.isqrt(DRAWS_MAX)} for one gate; 'gpusim predict' answers "
                         f"larger layers from the expectation)")
    nnz = positions * density
    if nnz > NNZ_MAX:
        raise InputError(f"hidden={hidden} at density {density:g} has about {nnz:.3g} nonzeros; "
                         f"this tool analyses at most {NNZ_MAX:.0e}")


def check_layer_fits(spec, hidden: int, batch: int, density: float, dense: bool = False,
                     dtype: str = "fp32") -> None:
    """Refuse, *before* its matrix is generated, a layer that certainly does not fit: its weights
    (and indices) alone exceed the whole GPU's register file, or h exceeds shared memory. Layers
    near the limit are left to the kernel builder, which decides on the real matrix. The message
    is the capacity model's: the limit and the largest size that fits."""
    n, b = int(hidden), int(batch)
    regs_per_weight = (1 if dense else 2) * (0.5 if dtype == "fp16" else 1)
    weights = n * n * (1.0 if dense else density) * regs_per_weight
    if weights > spec.sm_count * spec.regs_per_sm or 4 * n * b > spec.smem_bytes_per_cta:
        from models.capacity import check

        check(spec, n, b, 1.0 if dense else density, dense=dense, exact=False, dtype=dtype)
        raise InputError(f"hidden={n} batch={b} does not fit on {spec.name}")  # not reached


def check_warps_per_cta(spec, warps: int) -> None:
    most = min(WARPS_PER_CTA_MAX, spec.max_threads_per_cta // 32)
    if not 1 <= warps <= most:
        raise InputError(f"warps-per-cta={warps} ({32 * warps} threads) is outside 1..{most} "
                         f"({spec.name}: max_threads_per_cta {spec.max_threads_per_cta})")


# --- files --------------------------------------------------------------------------------------

def read_file(path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; a directory, FIFO, device or socket
    is refused without opening it for reading (opening never blocks)."""
    p = os.fspath(path)
    if "\0" in p:
        raise InputError(f"{what} {show(p)}: a path cannot contain a NUL character")
    try:
        fd = os.open(p, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise InputError(f"{what} {p} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"{what} {p} is a directory; accepted: a regular file") from None
    except OSError as exc:
        raise InputError(f"{what} {p} cannot be opened ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{what} {p} is a directory; accepted: a regular file")
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{what} {p} is not a regular file (a FIFO, device or socket); "
                             f"accepted: a regular file")
        if st.st_size > max_bytes:
            raise InputError(f"{what} {p} is {st.st_size} bytes; accepted: at most {max_bytes}")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:
            raise InputError(f"{what} {p} is over {max_bytes} bytes; accepted: at most "
                             f"{max_bytes}")
        return b"".join(chunks)
    except OSError as exc:
        raise InputError(f"{what} {p} cannot be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def read_text(path, what: str, max_bytes: int) -> str:
    """:func:`read_file` decoded as UTF-8 (a binary file is refused with one line)."""
    data = read_file(path, what, max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {os.fspath(path)} is not UTF-8 text (byte {exc.start} is "
                         f"{data[exc.start]:#04x}); accepted: a UTF-8 text file") from None


def load_json_text(text: str, origin: str):
    """Parse JSON; ``Infinity``/``NaN`` parse to floats, which every schema then refuses where a
    finite number is required."""
    import json

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{origin} is not valid JSON ({exc})") from None
    except (ValueError, RecursionError) as exc:  # 5000-digit integers, nesting beyond the stack
        raise InputError(f"{origin} is not valid JSON ({type(exc).__name__}: "
                         f"{show(str(exc), 80)})") from None


# --- record schemas -----------------------------------------------------------------------------

class _Bad(Exception):
    def __init__(self, where: str, value, accepted: str):
        super().__init__(where)
        self.where, self.value, self.accepted = where, value, accepted


class Schema:
    accepted = "a value"

    def check(self, value, where: str):
        return value

    def bad(self, value, where: str):
        raise _Bad(where, value, self.accepted)


class Any_(Schema):
    accepted = "any value"


class Num(Schema):
    """A JSON number (never a boolean) in [lo, hi] (``lo_open``: (lo, hi]); finite unless
    ``allow_inf``; ``integer``: a whole number."""

    def __init__(self, lo: float, hi: float, *, lo_open: bool = False, integer: bool = False,
                 allow_inf: bool = False, unit: str = ""):
        self.lo, self.hi, self.lo_open, self.integer = lo, hi, lo_open, integer
        self.allow_inf = allow_inf
        kind = "a whole number" if integer else "a number"
        rng = f"{'(' if lo_open else '['}{lo:g}, {hi:g}]"
        self.accepted = f"{kind}{' of ' + unit if unit else ''} in {rng}"

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.bad(value, where)
        if isinstance(value, float) and math.isnan(value):
            self.bad(value, where)
        if math.isinf(value) and not (self.allow_inf and value > 0):
            self.bad(value, where)
        if self.integer and not float(value).is_integer():
            self.bad(value, where)
        if not math.isinf(value) and (value < self.lo or value > self.hi or
                                      (self.lo_open and value == self.lo)):
            self.bad(value, where)
        return value


class Int(Num):
    """A JSON integer (not 3.0, not a boolean) in lo..hi."""

    def __init__(self, lo: int, hi: int):
        super().__init__(lo, hi, integer=True)
        self.accepted = f"an integer in {lo}..{hi}"

    def check(self, value, where):
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(value, where)
        return super().check(value, where)


class Str(Schema):
    def __init__(self, choices: tuple | None = None, max_len: int = 10_000):
        self.choices, self.max_len = choices, max_len
        self.accepted = (f"one of {', '.join(map(str, choices))}" if choices else
                         f"a non-empty string of at most {max_len} characters")

    def check(self, value, where):
        if not isinstance(value, str) or not value or len(value) > self.max_len:
            self.bad(value, where)
        if self.choices is not None and value not in self.choices:
            self.bad(value, where)
        return value


class Bool(Schema):
    accepted = "true or false"

    def check(self, value, where):
        if not isinstance(value, bool):
            self.bad(value, where)
        return value


class Nullable(Schema):
    def __init__(self, inner: Schema):
        self.inner = inner
        self.accepted = f"null or {inner.accepted}"

    def check(self, value, where):
        return None if value is None else self.inner.check(value, where)


class OneOf(Schema):
    def __init__(self, *options: Schema):
        self.options = options
        self.accepted = " or ".join(o.accepted for o in options)

    def check(self, value, where):
        for o in self.options:
            try:
                return o.check(value, where)
            except _Bad:
                pass
        self.bad(value, where)


class Seq(Schema):
    """A JSON list of ``item`` of ``length`` (or min_len..max_len) entries."""

    def __init__(self, item: Schema, *, length: int | None = None, min_len: int = 0,
                 max_len: int = 1_000_000):
        self.item, self.length, self.min_len, self.max_len = item, length, min_len, max_len
        n = f"{length}" if length is not None else f"{min_len}..{max_len}"
        self.accepted = f"a list of {n} entries, each {item.accepted}"

    def check(self, value, where):
        if not isinstance(value, list):
            self.bad(value, where)
        if (self.length is not None and len(value) != self.length) or \
                not self.min_len <= len(value) <= self.max_len:
            self.bad(value, where)
        for i, x in enumerate(value):
            self.item.check(x, f"{where}[{i}]")
        return value


class Map(Schema):
    """A JSON object with any keys, each value ``value``."""

    def __init__(self, value: Schema, max_len: int = 1_000_000):
        self.value, self.max_len = value, max_len
        self.accepted = f"an object of at most {max_len} entries"

    def check(self, value, where):
        if not isinstance(value, dict) or len(value) > self.max_len:
            self.bad(value, where)
        for k, v in value.items():
            self.value.check(v, f"{where}[{k!r}]")
        return value


class Obj(Schema):
    """A JSON object with ``required`` and ``optional`` fields (others are kept unchecked);
    ``rules``: functions of the object returning further required fields (e.g. a ``result`` when
    ``status == "ok"``), applied after the fields above were checked."""

    accepted = "an object"

    def __init__(self, required: dict, optional: dict | None = None, rules=()):
        self.required, self.optional, self.rules = required, optional or {}, tuple(rules)

    def check(self, value, where):
        if not isinstance(value, dict):
            raise _Bad(where, value, "an object")
        self._fields(value, where, self.required, True)
        self._fields(value, where, self.optional, False)
        for rule in self.rules:
            self._fields(value, where, rule(value) or {}, True)
        return value

    @staticmethod
    def _fields(value: dict, where: str, fields: dict, required: bool) -> None:
        for f in fields:
            if f not in value:
                if required:
                    raise _Missing(where, f, tuple(fields))
                continue
        for f, schema in fields.items():
            if f in value:
                schema.check(value[f], f"{where}.{f}" if where else f)


class _Missing(Exception):
    def __init__(self, where: str, field: str, fields: tuple):
        super().__init__(where)
        self.where, self.field, self.fields = where, field, fields


def check_schema(schema: Schema, value, origin: str, where: str = ""):
    """Validate ``value`` against ``schema``; one InputError naming the field, the value and
    what is accepted (``{origin}: cases[3].result.per_step_s=1e+300; accepted: ...``).
    ``where``: the path of ``value`` inside its file ("" for the top level)."""
    try:
        return schema.check(value, where)
    except _Missing as exc:
        raise InputError(f"{origin}: {exc.where or 'the top level'} has no field {exc.field!r} "
                         f"(required: {', '.join(exc.fields)})") from None
    except _Bad as exc:
        at = exc.where or "the top level"
        if exc.accepted == "an object":
            raise InputError(f"{origin}: {at} must be an object, not "
                             f"{_kind(exc.value)}") from None
        raise InputError(f"{origin}: {at}={_kind(exc.value)}; accepted: {exc.accepted}") from None


def _kind(value) -> str:
    """A recorded value as JSON spells it (true, null, Infinity), lists and objects by kind."""
    import json

    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# --- outputs ------------------------------------------------------------------------------------

def check_output_path(path, exts: tuple[str, ...], what: str = "output") -> Path:
    """An output file the command can write when its work is done, checked before the work: the
    extension accepted, its directory existing, and the file really creatable there (probed by
    creating it and removing it again, so a read-only file system or /proc is caught even for
    root; an existing file is opened for appending, never truncated)."""
    p = os.fspath(path)
    if not p or "\0" in p:
        raise InputError(f"{what} {show(p)} is not a file name")
    path = Path(p)
    if path.suffix.lower() not in exts:
        raise InputError(f"{what} file {show(p)} must end in {' or '.join(exts)}")
    parent = path.parent
    try:
        if path.is_dir():
            raise InputError(f"{what} file {show(p)} is a directory; accepted: a file name "
                             f"ending in {' or '.join(exts)}")
        if not parent.is_dir():
            raise InputError(f"{what} file {show(p)}: directory {str(parent)!r} does not exist")
        if os.path.lexists(path):
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"{what} file {show(p)} exists and is not a regular file")
            os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
        else:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            os.unlink(path)
    except OSError as exc:
        raise InputError(f"{what} file {show(p)} cannot be written "
                         f"({exc.strerror or exc})") from None
    return path


def check_plot_backend() -> None:
    """PNG output needs matplotlib: say so before the work, not after it."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        raise InputError("writing a PNG needs matplotlib, which is not installed (pip install "
                         "matplotlib); run without the plot option")


def check_scheduler(scheduler: str | None, dask_local: bool) -> str:
    """The sweep scheduler: serial, local, dask-local or dask://host:port / tcp://host:port."""
    if dask_local:
        if scheduler not in (None, "dask-local"):
            raise InputError(f"--dask-local and --scheduler {scheduler} contradict each other; "
                             f"give one of them")
        return "dask-local"
    if scheduler is None:
        return "local"
    if scheduler in ("serial", "local", "dask-local"):
        return scheduler
    for prefix in ("dask://", "tcp://"):
        if scheduler.startswith(prefix):
            host, sep, port = scheduler[len(prefix):].rpartition(":")
            if sep and host and port.isdigit() and 1 <= int(port) <= 65535 and "/" not in host:
                return scheduler
            raise InputError(f"scheduler={show(scheduler)} needs a host and a port; accepted: "
                             f"{prefix}HOST:PORT (port 1..65535)")
    raise InputError(f"scheduler={show(scheduler)} is not supported; accepted: serial, local, "
                     f"dask-local, dask://host:port")


# --- values against the reference ---------------------------------------------------------------

def require_values(err: float, what: str) -> None:
    """Raise :class:`ValueMismatchError` unless ``err`` (a max_rel_err) is within the simulator's
    tolerance (:data:`kernels_ir.kernels.sparse_rnn.VALUE_TOLERANCE`)."""
    from kernels_ir.kernels.sparse_rnn import VALUE_TOLERANCE

    if not (err <= VALUE_TOLERANCE):  # nan fails too
        raise ValueMismatchError(f"{what}: values differ from the float64 reference: "
                                 f"max_rel_err={err:.3g} > {VALUE_TOLERANCE:g}")


def check_values(result, reference, what: str) -> float:
    """Compare a kernel's outputs ``result`` (T+1, N, B; row 0 is h0) with the float64
    ``reference`` of the same shape (steps 1..T are compared, see
    :func:`kernels_ir.kernels.sparse_rnn.max_rel_err`); return max_rel_err or raise
    :class:`ValueMismatchError` naming ``what``."""
    import numpy as np

    from kernels_ir.kernels.sparse_rnn import max_rel_err

    result, reference = np.asarray(result), np.asarray(reference)
    if result.shape != reference.shape:
        raise ValueMismatchError(f"{what}: outputs of shape {result.shape} cannot be compared "
                                 f"with the reference's {reference.shape}")
    err = max_rel_err(result, reference)
    require_values(err, what)
    return err


# --- the command line ---------------------------------------------------------------------------

_OUTPUTS = {  # attribute -> (extensions, what, is a plot)
    "plot": ((".png",), "plot", True),
    "csv": ((".csv",), "CSV output", False),
}


def _spec(args):
    from gpusim.specs import load_spec

    return load_spec(args.gpu)


def check_args(command: str, args) -> None:
    """Every check of a parsed command line that needs no work: output paths, bounds that depend
    on two values or on the GPU spec, contradicting options. Called by ``gpusim.cli.main`` before
    the subcommand runs."""
    for attr, (exts, what, plot) in _OUTPUTS.items():
        value = getattr(args, attr, None)
        if isinstance(value, (str, os.PathLike)):
            check_output_path(value, exts, what)
            if plot:
                check_plot_backend()
    seed = getattr(args, "seed", None)
    if isinstance(seed, int) and seed > SEED_MAX:
        raise InputError(f"seed={seed} is too large; accepted 0..{SEED_MAX}")
    sample = getattr(args, "sample_steps", None)
    if isinstance(sample, int) and sample > TIMESTEPS_MAX:
        raise InputError(f"sample-steps={sample} is too large; accepted 1..{TIMESTEPS_MAX}")
    check = _COMMAND_CHECKS.get(command)
    if check is not None:
        check(args)


def _check_layer_command(args) -> None:
    """run, simulate, ir, timeline: the layer's input sequence, then the spec's capacity."""
    density_value(args.density)
    check_sequence(args.hidden, args.batch, args.timesteps)
    check_nnz(args.hidden, args.density)
    spec = _spec(args)
    sms = getattr(args, "sms", None)
    if sms is not None and sms > spec.sm_count:
        raise InputError(f"sms={sms} is more than the {spec.sm_count} SMs of {spec.name}")
    check_layer_fits(spec, args.hidden, args.batch, args.density,
                     dense=bool(getattr(args, "dense", False)))


def _check_predict(args) -> None:
    if getattr(args, "engine", "model") == "sim":
        from gpusim.pricing import STEPS_MAX

        steps = STEPS_MAX if args.sample_steps is None else args.sample_steps + 2
        check_sequence(args.hidden, args.batch, steps)
    _spec(args)


def _check_mapping(args) -> None:
    density_value(args.density)
    check_nnz(args.hidden, args.density)
    spec = _spec(args)
    threads = args.threads_per_cta
    if threads % 32 or threads > spec.max_threads_per_cta:
        raise InputError(f"threads-per-cta={threads} must be a multiple of 32 in "
                         f"32..{spec.max_threads_per_cta}")
    n_warps = spec.sm_count * (threads // 32)
    if not 0 <= args.warp < n_warps:
        raise InputError(f"warp={args.warp} is outside 0..{n_warps - 1} ({spec.sm_count} SMs x "
                         f"{threads // 32} warps)")
    check_layer_fits(spec, args.hidden, args.batch, args.density)


def _check_banks(args) -> None:
    density_value(args.density)
    if args.batch > BATCH_MAX:
        raise InputError(f"batch={args.batch} is too large; accepted 1..{BATCH_MAX}")
    check_nnz(args.hidden, args.density)
    spec = _spec(args)
    if args.warps_per_cta is not None:
        check_warps_per_cta(spec, args.warps_per_cta)


def _check_sweep(args) -> None:
    if not (args.csv or args.json or args.plot):
        raise InputError("sweep: give at least one output: --csv FILE, --json or --plot FILE")
    check_scheduler(args.scheduler, bool(args.dask_local))
    if args.workers is not None and not 1 <= args.workers <= WORKERS_MAX:
        raise InputError(f"workers={args.workers} is outside 1..{WORKERS_MAX}")
    gpus = list(args.gpu)
    if not gpus:
        raise InputError("gpu names no GPU; accepted: comma-separated spec names")
    if len(gpus) > 64:
        raise InputError(f"gpu: {len(gpus)} GPUs; accepted: at most 64")
    from gpusim.specs import load_spec

    for g in gpus:
        load_spec(g)
    n = len(gpus) * len(args.hidden) * len(args.batch) * len(args.density)
    if n > SWEEP_CONFIGS_MAX:
        raise InputError(f"sweep of {n:,} configurations ({len(gpus)} GPUs x {len(args.hidden)} "
                         f"hidden x {len(args.batch)} batch x {len(args.density)} densities); "
                         f"accepted: at most {SWEEP_CONFIGS_MAX:,}")


def _check_capacity(args) -> None:
    for d in args.density:
        density_value(d)
    if args.batch > BATCH_MAX:
        raise InputError(f"batch={args.batch} is absurd for a recurrent layer; accepted: "
                         f"1..{BATCH_MAX}")
    _spec(args)


def _check_specs(args) -> None:
    if args.gpu is not None:
        _spec(args)


_COMMAND_CHECKS = {
    "run": _check_layer_command, "simulate": _check_layer_command, "ir": _check_layer_command,
    "timeline": _check_layer_command, "predict": _check_predict, "mapping": _check_mapping,
    "banks": _check_banks, "sweep": _check_sweep, "capacity": _check_capacity,
    "specs": _check_specs,
}
