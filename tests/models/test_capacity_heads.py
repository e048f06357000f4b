"""Capacity of multi-head (block-diagonal) layers: the expectation against the kernel builder.

``models.capacity.fit(..., heads=H)`` answers with expected row lengths (a row of a head has
Binomial(N / H, d) nonzeros): whole heads per CTA when a CTA's registers hold them (the
CTA-local exchange), else the heads dealt over all warps. The builder decides the same question
on a concrete seeded layer (``kernels_ir.mapping.dealt_slots``, the deal without placing a
weight, then its capacity check). These tests hold the two together.
"""

import pytest

import models.capacity as cap
from gpusim.cli import main
from gpusim.specs import load_spec
from kernels_ir.errors import CapacityError, InputError
from kernels_ir.kernels.sparse_rnn import LOCAL, _map_and_check, make_layer
from kernels_ir.mapping import dealt_slots, map_matrix
from models.sparse import random_layer

H100 = load_spec("h100")
LAYERS = [  # hidden, heads, density, cell
    (1024, 8, 0.1, "rnn"), (2048, 16, 0.2, "rnn"), (4096, 128, 0.14, "rnn"),
    (4096, 128, 0.14, "lstm"), (2048, 2, 0.05, "rnn"), (8192, 64, 0.3, "rnn"),
    (3072, 4, 0.3, "gru"), (1024, 256, 0.5, "rnn"),
]


@pytest.mark.parametrize("hidden,heads,density,cell", LAYERS)
def test_expected_slots_follow_the_deal(hidden, heads, density, cell):
    layer = random_layer(hidden, 1, density, 1, 0, cell=cell, heads=heads)
    gates = cap.CELLS[cell]
    kw = {} if gates == 1 else {"gates": gates}
    for local in (True, False):
        K, _ = dealt_slots(layer.U, n_ctas=H100.sm_count, warps_per_cta=8,
                           heads=heads if local else 1, **kw)
        Ke, R = cap.expected_slots(H100, hidden, density, cell, heads=heads, local=local)
        assert R == len(K)
        # an expectation against one draw: the total slots within 5% (the gated deal's
        # expectation is a little pessimistic, models.capacity.unit_slot_quantiles)
        assert sum(Ke) == pytest.approx(sum(K), rel=0.05, abs=1)


@pytest.mark.parametrize("dense", [False, True])
@pytest.mark.parametrize("heads,cell", [(8, "rnn"), (64, "lstm")])
def test_dealt_slots_are_the_mappings(heads, cell, dense):
    gates = cap.CELLS[cell]
    layer = random_layer(512, 4, 1.0 if dense else 0.2, 1, 3, cell=cell, heads=heads)
    for h in (heads, 1):
        kw = {"heads": h} | ({} if gates == 1 else {"gates": gates})
        m = map_matrix(layer.U, n_ctas=132, warps_per_cta=8, batch=4, wide_loads=True,
                       dense=dense, **kw)
        K, hpc = dealt_slots(layer.U, n_ctas=132, warps_per_cta=8, dense=dense, **kw)
        assert K == m.slots and hpc == m.heads_per_cta


@pytest.mark.parametrize("batch,density", [(4, 0.1), (4, 0.01), (1, 0.3)])
def test_the_cta_local_limit_is_the_builders(batch, density):
    """The largest CTA-local size by the expectation is CTA-local in the builder too, and within
    5% of the largest the builder makes CTA-local for the seeded draws (one draw per size, so
    the builder's answer is not monotone near the limit: K_j rounds up per draw)."""
    heads = 8
    best = cap.max_hidden(H100, density, batch, heads=heads, local=True)
    assert best.limit == "whole heads per CTA" and best.hidden % heads == 0

    def local(n):
        layer = make_layer(n, batch, density, 1, 0, heads=heads)
        args = dict(sync="lamport", wide_loads=True, layout="naive", threads_per_cta=256,
                    seed=0, dense=False, n_ctas=H100.sm_count)
        try:
            return _map_and_check(layer, H100, heads=heads, **args)[1] == LOCAL
        except CapacityError:
            return False

    assert local(best.hidden)
    sizes = range(best.hidden - best.hidden // 10 // heads * heads,
                  best.hidden + best.hidden // 10 + heads, heads)
    builder = max(n for n in sizes if local(n))
    assert builder < sizes[-1]                  # the scan reached sizes the builder refuses
    assert abs(best.hidden / builder - 1) <= 0.05


def test_fit_reports_the_exchange_and_the_limits():
    f = cap.fit(H100, 2048, 4, 0.1, heads=8)
    assert f.fits and f.exchange == "cta"
    g = cap.fit(H100, 8192, 4, 0.1, heads=8)
    assert g.fits and g.exchange == "grid"
    n = cap.max_hidden(H100, 0.1, 4, heads=8)
    assert n.hidden % 8 == 0 and n.hidden > 8192
    assert not cap.fit(H100, n.hidden + 8, 4, 0.1, heads=8).fits
    # one head is the single-head answer
    assert cap.max_hidden(H100, 0.1, 4, heads=1).hidden == cap.max_hidden(H100, 0.1, 4).hidden
    with pytest.raises(InputError, match="heads=3 must divide hidden=1024"):
        cap.fit(H100, 1024, 4, 0.1, heads=3)
    with pytest.raises(InputError, match="heads=0"):
        cap.max_hidden(H100, 0.1, 4, heads=0)


def test_capacity_cli_heads(capsys):
    assert main(["capacity", "--gpu", "h100", "--heads", "8", "--density", "0.1",
                 "--batch", "4"]) == 0
    out = capsys.readouterr().out
    assert "heads=8" in out and "whole heads per CTA up to hidden=" in out
    assert main(["capacity", "--gpu", "h100", "--heads", "8", "--density", "0.1", "--json"]) == 0
    import json

    data = json.loads(capsys.readouterr().out)
    local = data["max_hidden_cta_local"]["sparse"][0]["hidden"]
    grid = data["max_hidden"]["sparse"][0]["hidden"]
    assert data["heads"] == 8 and 0 < local < grid and local % 8 == 0


def test_capacity_cli_rejects_bad_heads(capsys):
    with pytest.raises(SystemExit) as e:
        main(["capacity", "--gpu", "h100", "--heads", "0"])
    assert e.value.code != 0
    assert "heads=0 must be a positive integer" in capsys.readouterr().err
