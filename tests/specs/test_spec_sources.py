"""Every spec value's source can be followed inside the repository.

A ``source`` string (and the ``calibration`` field) of ``gpusim/specs/*.toml`` may cite:

- ``docs/<page>.md sN``: section N of a page in ``docs/`` (a heading ``N. ...``);
- ``[KEY]``: a public source, a heading ``[KEY] ...`` of ``docs/hardware_sources.md``;
- a path of the repository (``measurements/h100/gather.json``, ``measurements/gather.py``);
- a module or function of the project (``gpusim.calibrate``, ``gpusim.engine.l2.unit_parity``).

Every citation must resolve, no citation may point outside the repository, and every value must
cite at least one thing that resolves.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "gpusim" / "specs").glob("*.toml"))
SOURCES_PAGE = ROOT / "docs" / "hardware_sources.md"
REPO_DIRS = ("measurements", "gpusim", "kernels_ir", "models", "docs", "benchmarks", "notebooks",
             "tests")

SECTION_REF = re.compile(r"\b(docs/[\w./-]+\.md) s(\d+(?:\.\d+)?)\b")
BARE_SECTION = re.compile(r"(?:^|[;(,]\s*)s(\d+(?:\.\d+)?)\b")   # "s4:" after a page was named
KEY_REF = re.compile(r"\[([A-Za-z][A-Za-z0-9-]*)\]")
PATH_REF = re.compile(r"(?<![\w/.-])((?:" + "|".join(REPO_DIRS) + r")/[\w./-]*[\w])")
MODULE_REF = re.compile(r"\b((?:gpusim|kernels_ir|models)(?:\.[A-Za-z_]\w*)+)")
# a path that leaves the repository: absolute, parent-relative, home-relative, or a note that
# is not part of it
OUTSIDE = re.compile(r"(?<![\w)\]])/[A-Za-z]|\.\./|~/|\b(?:DESIGN|KINDS|STYLE)\.md\b|"
                     r"\bhw_params\b|\bcuda_backend\.md\b|\bshared/refer" r"ence\b")


def _headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text().splitlines()
            if line.startswith("#")]


def _section_exists(page: Path, number: str) -> bool:
    return any(re.match(rf"{re.escape(number)}\.?\s", h) for h in _headings(page))


def _key_exists(key: str) -> bool:
    return any(h.startswith(f"[{key}]") for h in _headings(SOURCES_PAGE))


def _resolves_as_module(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def check_citations(text: str) -> tuple[list[str], list[str]]:
    """(resolved citations, problems) of one source string."""
    ok, bad = [], []
    for m in OUTSIDE.finditer(text):
        bad.append(f"points outside the repository: {text[max(0, m.start() - 20):m.end() + 20]!r}")
    pages = []
    for page, number in SECTION_REF.findall(text):
        path = ROOT / page
        pages.append(path)
        if not path.is_file():
            bad.append(f"cites {page}, which does not exist")
        elif not _section_exists(path, number):
            bad.append(f"cites {page} s{number}, which has no heading '{number}.'")
        else:
            ok.append(f"{page} s{number}")
    rest = SECTION_REF.sub("", text)
    for number in BARE_SECTION.findall(rest):   # "s4" after "docs/hardware_sources.md s2: ..."
        page = pages[-1] if pages else None
        if page is None:
            bad.append(f"cites s{number} without naming a page (write docs/<page>.md s{number})")
        elif not _section_exists(page, number):
            bad.append(f"cites s{number} of {page.name}, which has no such heading")
    for key in KEY_REF.findall(text):
        if _key_exists(key):
            ok.append(f"[{key}]")
        else:
            bad.append(f"cites [{key}], which is not a heading of docs/hardware_sources.md")
    for path in PATH_REF.findall(SECTION_REF.sub("", text)):
        # a large record is kept gzipped (measurements.probe.read_record reads either name)
        if (ROOT / path).exists() or (ROOT / f"{path}.gz").is_file():
            ok.append(path)
        else:
            bad.append(f"cites {path}, which is not in the repository")
    for dotted in MODULE_REF.findall(text):
        if _resolves_as_module(dotted):
            ok.append(dotted)
        else:
            bad.append(f"cites {dotted}, which is not a module or attribute of the project")
    return ok, bad


def _entries():
    for spec in SPECS:
        data = tomllib.loads(spec.read_text())
        for table in ("params", "library"):
            for key, entry in data.get(table, {}).items():
                if isinstance(entry, dict):   # not e.g. library.transferred_from = "h100"
                    yield spec.name, f"{table}.{key}", entry


ENTRIES = list(_entries())


def test_the_bundled_specs_are_checked():
    assert [p.stem for p in SPECS] == ["h100", "h200", "v100"]
    assert len(ENTRIES) > 3 * 40


@pytest.mark.parametrize("spec,key,entry", ENTRIES, ids=[f"{s}:{k}" for s, k, _ in ENTRIES])
def test_every_source_resolves_inside_the_repository(spec, key, entry):
    ok, bad = check_citations(entry["source"])
    cal = entry.get("calibration")
    if cal:
        cal_ok, cal_bad = check_citations(cal)
        if not ((ROOT / cal).is_file() or (ROOT / f"{cal}.gz").is_file()):
            cal_bad.append(f"calibration record {cal} is not a file of the repository")
        ok += cal_ok
        bad += cal_bad
    assert not bad, f"{spec} {key}: " + "; ".join(bad)
    assert ok, f"{spec} {key}: the source cites nothing that can be followed: {entry['source']!r}"


def test_every_key_of_the_sources_page_names_a_public_source_or_a_record():
    """Each [KEY] heading has a body with an address (URL or arXiv) or names a repository file."""
    text = SOURCES_PAGE.read_text()
    blocks = re.split(r"^### ", text, flags=re.M)[1:]
    assert len(blocks) >= 20
    for block in blocks:
        title, _, body = block.partition("\n")
        assert title.startswith("["), title
        has_address = "https://" in body or "measurements/" in body
        assert has_address or "Second-hand" in body, f"{title}: no address to follow"


@pytest.mark.parametrize("text,problem", [
    ("docs/hardware_sources.md s42: nothing", "no heading"),
    ("docs/nowhere.md s1: x", "does not exist"),
    ("[NO-SUCH-KEY] 12 cycles", "not a heading"),
    ("measurements/h100/no_such_record.json", "not in the repository"),
    ("see hw_params" + ".md s4", "outside"),
    ("copied from /work" + "/shared/notes", "outside"),
    ("gpusim.engine.no_such_module", "not a module"),
    ("s4: 30 cycles", "without naming a page"),
])
def test_the_checker_catches_bad_citations(text, problem):
    _, bad = check_citations(text)
    assert any(problem in b for b in bad), (text, bad)


def test_the_checker_accepts_good_citations():
    ok, bad = check_citations("docs/hardware_sources.md s4: 23.5 cycles [MT4G-V]; "
                              "measurements/h100/gather.json, gpusim.engine.l2.unit_parity")
    assert not bad and len(ok) == 4, (ok, bad)
