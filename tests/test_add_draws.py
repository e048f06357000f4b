"""measurements/add_draws.py: a device call's draws and reports pair up, the machine's paths
become the repository's, and a draw's records are copied xz-compressed (readable as the plain
ones)."""

import gzip
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from measurements import add_draws as ad  # noqa: E402
from measurements.add_draws import copy_draw, find, local_paths  # noqa: E402


def _device_folder(tmp_path, seeds, reports):
    out = tmp_path / "device"
    for s in seeds:
        d = out / f"fresh_2026-11-28_s{s}"
        d.mkdir(parents=True)
        (d / "campaign.json").write_text(json.dumps({"cases": [], "seed": s}))
        (d / "ncu.json").write_text("{}")
        (d / "campaign_log.txt").write_text("log\n")
    for s in reports:
        (out / f"cc_s{s}.json").write_text("{}")
    return out


def test_draws_and_reports_must_pair_up(tmp_path):
    out = _device_folder(tmp_path, (41, 42), (41, 42))
    draws, reports = find([out])
    assert [p.name for p in draws] == ["fresh_2026-11-28_s41", "fresh_2026-11-28_s42"]
    assert [p.name for p in reports] == ["cc_s41.json", "cc_s42.json"]
    with pytest.raises(SystemExit, match=r"draws \['43'\] and reports \[\] .* do not pair up"):
        find([_device_folder(tmp_path / "b", (43,), ())])
    with pytest.raises(SystemExit, match="not a folder"):
        find([tmp_path / "nowhere"])


def test_machine_paths_become_the_repositorys():
    text = json.dumps({"data": "/root/out/fresh_2026-11-28_s37",
                       "draws": [{"path": "/root/out/fresh_2026-11-28_s37", "draw":
                                  "fresh_2026-11-28_s37"}], "other": "/root/out/cc.json"})
    got = json.loads(local_paths(text, "h200"))
    assert got["data"] == got["draws"][0]["path"] == "measurements/h200/fresh_2026-11-28_s37"
    assert got["draws"][0]["draw"] == "fresh_2026-11-28_s37" and got["other"] == "/root/out/cc.json"


def test_a_copied_draw_keeps_its_records_xz_compressed(tmp_path):
    """Plain or gzipped (as a device call brings them back), the records, the log and the
    Nsight CSV land xz-compressed, the same bytes for the same content; the readers find them."""
    import lzma

    from gpusim.measurements import record_file

    out = _device_folder(tmp_path, (44,), (44,))
    src = out / "fresh_2026-11-28_s44"
    (src / "ncu_raw.csv.gz").write_bytes(gzip.compress(b"a,b\n"))
    dest = tmp_path / "repo" / "fresh_2026-11-28_s44"
    copy_draw(src, dest)
    assert sorted(p.name for p in dest.iterdir()) == ["campaign.json.xz", "campaign_log.txt.xz",
                                                       "ncu.json.xz", "ncu_raw.csv.xz"]
    assert lzma.decompress((dest / "campaign_log.txt.xz").read_bytes()) == b"log\n"
    assert lzma.decompress((dest / "ncu_raw.csv.xz").read_bytes()) == b"a,b\n"
    assert record_file(dest / "campaign.json").name == "campaign.json.xz"
    assert json.loads(lzma.decompress((dest / "campaign.json.xz").read_bytes())) == \
        {"cases": [], "seed": 44}
    a = (dest / "campaign.json.xz").read_bytes()
    copy_draw(src, tmp_path / "again" / "d")
    assert (tmp_path / "again" / "d" / "campaign.json.xz").read_bytes() == a


def test_the_previous_bands_are_kept_before_new_draws_replace_them(tmp_path, monkeypatch):
    """``keep_previous_bands`` writes the GPU's current bands beside its draws, named by their
    first and last seed, and leaves an existing file alone; no bands, no file."""
    import gpusim.uncertainty as u
    from measurements.add_draws import keep_previous_bands

    bands = {"h200": {"draws": "fresh_2026-11-30_s112, fresh_2026-11-30_s111", "layers": 32}}
    monkeypatch.setattr(u, "load_bands", lambda: bands)
    path = keep_previous_bands("h200", tmp_path)
    assert path == tmp_path / "error_bands_s111_s112.json"
    assert json.loads(path.read_text()) == bands["h200"]
    path.write_text("{}")
    assert keep_previous_bands("h200", tmp_path) == path and path.read_text() == "{}"
    assert keep_previous_bands("h100", tmp_path) is None


def test_the_readmes_quote_the_details_of_the_h200_draws():
    """``add_draws.details``: the per-draw figures and the bootstrap interval of the H200's
    out-of-sample draws are what the README quotes."""
    from measurements.probe import read_record

    merged = read_record(str(ROOT / "measurements" / "h200" / "crosscheck_fresh.json"))
    lines = ad.details(merged, resamples=5000)
    text = " ".join((ROOT / "README.md").read_text().split())
    per = lines[0].split(": ", 1)[1]
    assert f"Per draw (simulator / model speedup MAPE; fastest named): {per}." in text
    sim, model = lines[1].split(": ", 1)[1].split(", ")
    assert f"Bootstrap 95% over the 64 layers: {sim}, {model}." in text
    misses = lines[2]
    assert misses == ("the simulator's 1 misses: 1 sparse-bank named where the GPU ran "
                      "sparse-lamport; 1 within 5% of the fastest")


def test_where_the_speedup_error_comes_from():
    """``speedup_parts``: the log speedup error is the baseline's log error less the best
    persistent kernel's, plus the picks (zero where the engine names the GPU's two kernels);
    the README quotes the parts of the H200's out-of-sample layers."""
    import math

    from measurements.probe import read_record

    t = {"a": 1.0, "b": 2.0, "c": 3.0}
    row = {"measured": {"best_persistent": "a", "next_best": "b", "speedup": 2.0, "times_s": t},
           "sim": {"speedup": 2.4 / 0.8, "times_s": {"a": 0.8, "b": 2.4, "c": 3.0}}}
    q = ad.speedup_parts([row], "sim")
    assert q["baseline"] == pytest.approx(math.log(1.2))
    assert q["persistent"] == pytest.approx(-math.log(0.8))
    assert q["picks"] == pytest.approx(0.0, abs=1e-12)
    other = dict(row, sim={"speedup": 3.0 / 0.8, "times_s": {"a": 0.8, "b": 2.4, "c": 3.0}})
    assert ad.speedup_parts([other], "sim")["picks"] == pytest.approx(math.log(3.0 / 2.4))
    assert ad.speedup_parts([row], "sim")["by_baseline"]["b"]["layers"] == 1
    merged = read_record(str(ROOT / "measurements" / "h200" / "crosscheck_fresh.json"))
    sp = [r for r in merged["speedup"]["rows"] if r["sample"] == "out of sample"
          and "cell" not in r]
    sim, mod = ad.speedup_parts(sp, "sim"), ad.speedup_parts(sp, "model")
    text = " ".join((ROOT / "README.md").read_text().split())
    csr = sim["by_baseline"]["csr-row-per-warp"]
    assert (f"over the {len(sp)} layers): for the simulator {100 * sim['speedup']:.1f}% in the "
            f"speedup, {100 * sim['baseline']:.1f}% in the baseline it divides (the CSR kernel, "
            f"the GPU's next best on {csr['layers']} layers, {100 * csr['signed']:+.1f}% signed "
            f"and {100 * csr['abs']:.1f}%") in text
    assert (f"{100 * sim['persistent']:.1f}% in the best persistent kernel and "
            f"{100 * sim['picks']:.1f}% from naming other kernels; for the model "
            f"{100 * mod['speedup']:.1f}%, {100 * mod['baseline']:.1f}%") in text
