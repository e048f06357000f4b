"""Every plot command writes a readable PNG; the plot library functions hold their contracts.

A PNG counts as readable when matplotlib can read it back, it is larger than 10 kB and it is not
one flat colour. A command whose module does not exist yet is skipped with its name (the lead
checks that nothing is skipped at the end).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import numpy as np
import pytest

import gpusim.cli as cli

MIN_BYTES = 10_000
NEW_COMMANDS = {
    "mapping": ("gpusim.cli.mapping", "where every weight lives: SM, warp, lane, register slot"),
    "timeline": ("gpusim.cli.timeline", "per-SM timelines of the barrier and Lamport variants"),
}


@pytest.fixture
def gpusim_main(monkeypatch):
    """``gpusim.cli.main`` with this stream's subcommands registered (if the lead has not yet)."""
    commands = dict(cli.COMMANDS)
    for name, entry in NEW_COMMANDS.items():
        commands.setdefault(name, entry)
    monkeypatch.setattr(cli, "COMMANDS", commands)
    return cli.main


def check_png(path) -> None:
    import matplotlib.image as mpimg

    assert path.is_file(), f"{path} was not written"
    size = path.stat().st_size
    assert size > MIN_BYTES, f"{path.name} is only {size} bytes"
    img = mpimg.imread(path)
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 200, img.shape
    assert float(img[..., :3].std()) > 0.0, f"{path.name} is a single flat colour"


# (command, module, arguments before the output path, output option)
PLOT_COMMANDS = [
    ("mapping", "gpusim.cli.mapping", ["--hidden", "256"], "--plot"),
    ("timeline", "gpusim.cli.timeline",
     ["--hidden", "256", "--timesteps", "4", "--sample-steps", "2", "--sms", "8"], "--plot"),
    ("banks", "gpusim.cli.banks", ["--hidden", "256", "--layout", "all"], "--plot"),
    ("simulate", "gpusim.cli.simulate",
     ["--hidden", "256", "--timesteps", "4", "--sample-steps", "2"], "--plot"),
    ("sweep", "gpusim.cli.sweep",
     ["--hidden", "256,1024,2048", "--batch", "4", "--density", "0.1,0.5",
      "--scheduler", "serial", "--no-progress"], "--plot"),
    ("crosscheck", "gpusim.cli.crosscheck", ["--every", "10", "--no-fresh"], "--plot"),
]


@pytest.mark.parametrize("name,module,argv,opt", PLOT_COMMANDS, ids=[c[0] for c in PLOT_COMMANDS])
def test_plot_command_writes_a_readable_png(name, module, argv, opt, tmp_path, gpusim_main,
                                            capsys):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"module {module} does not exist yet ('gpusim {name}' not built)")
    out = tmp_path / f"{name}.png"
    rc = gpusim_main([name, *argv, opt, str(out)])
    err = capsys.readouterr().err
    assert rc == 0, f"gpusim {name} failed: {err}"
    check_png(out)


# ----------------------------------------------------------------------------- gpusim mapping


def test_mapping_json_summary_is_consistent(tmp_path, gpusim_main, capsys):
    from gpusim.specs import load_spec

    assert gpusim_main(["mapping", "--hidden", "512", "--density", "0.2", "--json"]) == 0
    from kernels_ir.kernels.sparse_rnn import registers_needed

    s = json.loads(capsys.readouterr().out)
    spec = load_spec("v100")
    assert s["ctas"] == spec.sm_count and s["warps"] == spec.sm_count * s["warps_per_cta"]
    assert s["total_slots"] == sum(s["slots_per_row_slot"])
    assert len(s["slots_per_row_slot"]) == s["rows_per_warp"]
    assert 0.0 <= s["padding_fraction"] < 1.0
    assert sum(int(k) * v for k, v in s["warps_by_rows_held"].items()) == 512
    # the kernel's own count (models.capacity keeps a formula of its own, tested elsewhere)
    assert s["registers_per_thread"] == registers_needed(s["total_slots"], s["rows_per_warp"], 4,
                                                         False)
    assert s["fits_registers"] is True and s["register_budget"] == 255


@pytest.mark.parametrize("argv,needle", [
    (["mapping", "--warp", "640"], "warp=640 is outside 0..639"),
    (["mapping", "--threads-per-cta", "100"], "threads-per-cta=100 must be a multiple of 32"),
    (["mapping", "--batch", "3"], "batch=3 cannot use wide loads"),
    (["mapping", "--plot", "out.pdf"], "must end in .png"),
    (["timeline", "--sms", "500"], "sms=500 is more than the 80 SMs"),
])
def test_bad_input_is_one_line(argv, needle, gpusim_main, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert gpusim_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


def test_timeline_json_reports_both_variants(gpusim_main, capsys):
    argv = ["timeline", "--hidden", "256", "--timesteps", "4", "--sample-steps", "2", "--sms",
            "4", "--json"]
    assert gpusim_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["barrier"]["l2_transactions"]["atomic"] > 0      # the arrive counter
    assert out["lamport"]["l2_transactions"].get("atomic", 0) == 0
    assert out["barrier"]["max_rel_err"] < 1e-5 and out["lamport"]["max_rel_err"] < 1e-5
    assert out["speedup_lamport_over_barrier"] > 0


# ----------------------------------------------------------------------------- library functions


@pytest.fixture(scope="module")
def small_mapping():
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_sparse

    U = random_sparse(192, 192, 0.15, np.random.default_rng(3))
    return {lay: map_matrix(U, n_ctas=4, warps_per_cta=8, batch=4, wide_loads=True, layout=lay)
            for lay in ("naive", "optimal")}


def test_mapping_figures(small_mapping, tmp_path):
    from gpusim.plots.mapping import plot_mapping, plot_warp_grids, warp_grid
    from gpusim.plots.style import save_png

    m = small_mapping["naive"]
    check_png(save_png(plot_mapping(m, batch=4, wide_loads=True, warp=5), tmp_path / "m.png"))
    check_png(save_png(plot_warp_grids(list(small_mapping.values()), 5, batch=4,
                                       wide_loads=True), tmp_path / "g.png"))
    g = warp_grid(small_mapping["optimal"], 5, batch=4, wide_loads=True)
    assert g["cols"].shape == (m.total_slots, 32)
    # the grid shows exactly the warp's nonzeros, and banks are those of word col * B
    assert int((~g["pad"]).sum()) == int((~small_mapping["optimal"].pad[5]).sum())
    assert np.array_equal(g["banks"], (g["cols"] * 4) % 32)


def test_warp_outside_the_mapping_is_an_input_error(small_mapping):
    from gpusim.plots.mapping import warp_grid
    from kernels_ir.errors import InputError

    with pytest.raises(InputError, match="warp=32 is outside 0..31"):
        warp_grid(small_mapping["naive"], 32, batch=4, wide_loads=True)


def test_capacity_figure(tmp_path):
    from gpusim.plots.mapping import plot_capacity
    from gpusim.plots.style import save_png
    from gpusim.specs import load_spec

    fig = plot_capacity([load_spec("v100")], densities=[0.05, 0.3, 1.0], hiddens=[512, 2048])
    check_png(save_png(fig, tmp_path / "c.png"))


def test_sync_figure_and_timeline_arrays(tmp_path):
    from gpusim.cli.timeline import simulate_both
    from gpusim.plots.style import save_png
    from gpusim.plots.sync import plot_sync_comparison, timeline_arrays
    from gpusim.specs import load_spec
    from kernels_ir.kernels.sparse_rnn import make_layer

    spec = dataclasses.replace(load_spec("v100"), sm_count=4)
    res = simulate_both(spec, make_layer(128, 4, 0.1, 3, 0), sample_steps=2)
    start, end, cats = timeline_arrays(res["barrier"])
    assert start.shape == end.shape == (2, 4) and np.all(end > start)
    assert set(cats) == {"issue", "shared_memory", "waiting_for_data", "barrier"}
    check_png(save_png(plot_sync_comparison(res), tmp_path / "s.png"))


def test_save_png_refuses_other_suffixes(tmp_path):
    from gpusim.plots.style import figure, save_png
    from kernels_ir.errors import InputError

    fig, _ = figure()
    with pytest.raises(InputError, match="must end in .png"):
        save_png(fig, tmp_path / "x.svg")


# ------------------------------------------------------- readability of the default figures


def _no_overlap(labels) -> bool:
    boxes = [t.get_window_extent() for t in labels if t.get_text()]
    return all(not a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def test_sweep_heatmap_thins_hidden_ticks_so_labels_do_not_overlap():
    from gpusim.plots.speedup import speedup_heatmap, thinned_ticks

    hidden = list(range(256, 8193, 256))          # the README's 32 sizes
    cols = {k: [] for k in ("gpu", "batch", "hidden", "density", "speedup", "best_persistent")}
    for g in ("v100", "h100"):
        for h in hidden:
            for d in (0.01, 0.1):
                cols["gpu"].append(g)
                cols["batch"].append(4)
                cols["hidden"].append(h)
                cols["density"].append(d)
                cols["speedup"].append(1.0 + h / 8192)
                cols["best_persistent"].append("sparse-lamport")
    fig = speedup_heatmap(cols)
    fig.canvas.draw()
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 2
    for ax in panels:
        labels = ax.get_xticklabels()
        assert 2 <= len(labels) <= 9 and labels[0].get_text() == "256"
        assert _no_overlap(labels), [t.get_text() for t in labels]
    assert thinned_ticks(5) == [0, 1, 2, 3, 4]
    assert thinned_ticks(32)[0] == 0 and thinned_ticks(32)[-1] == 31


def _fake_timeline_result(n_sms: int, n_steps: int = 2):
    from types import SimpleNamespace

    br = {"issue": 10.0, "shared_memory": 5.0, "waiting_for_data": 3.0, "barrier": 1.0}
    steps = tuple(tuple((100.0 * s, 100.0 * s + 90.0, br) for _ in range(n_sms))
                  for s in range(n_steps))
    return SimpleNamespace(timeline=steps, clock_hz=1.5e9, kernel="k", gpu="v100",
                           per_step_s=1e-6, steps=n_steps, total_steps=64, extrapolated=True)


@pytest.mark.parametrize("n_sms,max_sms,shown", [(80, None, "all 80 SMs"),
                                                 (132, None, "all 132 SMs"),
                                                 (80, 16, "SMs 0-15 of 80")])
def test_timeline_draws_every_sm_or_says_which(n_sms, max_sms, shown, tmp_path, monkeypatch):
    import gpusim.plots.style as style
    from gpusim.plots.timeline import plot_timeline

    figs = []
    real_save = style.save_png
    monkeypatch.setattr(style, "save_png", lambda fig, path, **kw: (figs.append(fig),
                                                                   real_save(fig, path, **kw)))
    out = tmp_path / "t.png"
    plot_timeline(_fake_timeline_result(n_sms), str(out), max_sms=max_sms)
    check_png(out)
    ax = figs[0].axes[0]
    assert shown in ax.get_title() and "2 simulated steps of 64" in ax.get_title()
    rows = {round(p.get_y() + p.get_height() / 2) for p in ax.patches}
    assert rows == set(range(max_sms or n_sms))


def test_banks_all_layouts_are_panels_on_one_scale():
    from gpusim.plots.banks import conflicts_figure
    from kernels_ir.layouts import analyse
    from kernels_ir.mapping import map_matrix
    from models.sparse import random_sparse

    U = random_sparse(256, 256, 0.3, np.random.default_rng(0))
    reports = [analyse(map_matrix(U, n_ctas=4, warps_per_cta=2, batch=4, wide_loads=True,
                                  layout=name, seed=0), 4, True)
               for name in ("naive", "random", "greedy", "optimal")]
    fig = conflicts_figure(reports, "t")
    images = [im for ax in fig.axes for im in ax.get_images()]
    assert len(images) == 4
    assert len({im.get_clim() for im in images}) == 1     # one colour scale
    top = max(int(np.asarray(r.conflicts).sum(axis=2).max()) for r in reports)
    assert images[0].get_clim() == (0, max(1, top))
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    assert [t.split(":")[0] for t in titles] == [f"layout={n}" for n in
                                                  ("naive", "random", "greedy", "optimal")]


def test_crosscheck_plot_tells_sources_and_kinds_apart(tmp_path):
    from gpusim.plots.crosscheck import crosscheck_figure, plot_crosscheck

    rows = [
        {"id": "a", "kind": "sparse_persistent", "source": "simulator", "measured_s": 2e-6,
         "predicted_s": 2.2e-6, "model_s": 1.8e-6},
        {"id": "b", "kind": "csr", "source": "simulator", "measured_s": 4e-6,
         "predicted_s": 3.6e-6, "model_s": 2.0e-6},
        {"id": "c", "kind": "cublas", "source": "analytical", "measured_s": 2e-5,
         "predicted_s": 2.4e-5},
    ]
    summary = {"rows": rows, "gpu": "NVIDIA H100 80GB HBM3", "spec": "h100", "cases": 3}
    fig = crosscheck_figure(summary)
    ax = fig.axes[0]
    cols = ax.collections
    # one marker shape per source: circles (simulator) and triangles (analytical model)
    shapes = {len(c.get_paths()[0].vertices) for c in cols}
    assert len(shapes) == 2, shapes
    sim = [c for c in cols if np.allclose(c.get_offsets()[:, 1], [2.2]) or
           np.allclose(c.get_offsets()[:, 1], [3.6])]
    lib = [c for c in cols if np.allclose(c.get_offsets()[:, 1], [24.0])]
    assert sim and lib
    assert len(sim[0].get_paths()[0].vertices) != len(lib[0].get_paths()[0].vertices)
    # one colour per kind
    face = {tuple(np.round(c.get_facecolor()[0], 3)) for c in cols if len(c.get_facecolor())}
    assert len(face) >= 3
    texts = [t.get_text() for leg in ax.get_children() if hasattr(leg, "get_texts")
             for t in leg.get_texts()]
    assert "simulator" in texts and any("analytical model" in t for t in texts)
    assert {"sparse_persistent", "csr", "cublas"} <= set(texts)
    assert "simulator 10.0% (2)" in ax.get_title()
    check_png(plot_crosscheck(summary, tmp_path / "cc.png"))
