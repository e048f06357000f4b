import json

from gpusim.cli import main


def test_capacity_json(capsys):
    assert main(["capacity", "--density", "0.01,0.1", "--batch", "4", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    mh = rep["max_hidden"]
    assert [s["density"] for s in mh["sparse"]] == [0.01, 0.1]
    assert mh["sparse"][0]["limit"] == "shared memory"
    assert mh["sparse"][1]["limit"] == "registers"
    assert mh["dense"]["limit"] == "registers"
    assert mh["sparse"][1]["hidden"] > mh["dense"]["hidden"]
    assert f"hidden={mh['sparse'][1]['hidden']}" in mh["sparse"][1]["message"]


def test_capacity_table_and_fp16(capsys):
    assert main(["capacity", "--density", "0.1", "--dtype", "fp16", "--cell", "lstm"]) == 0
    out = capsys.readouterr().out
    assert "registers" in out and "dense" in out


def test_capacity_bad_input(capsys):
    for argv in (["capacity", "--density", "0"], ["capacity", "--gpu", "nope"],
                 ["capacity", "--batch", "-1"], ["capacity", "--dtype", "int8"]):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code
        err = capsys.readouterr().err
        assert rc == 2 and len(err.strip().splitlines()) == 1, argv


def test_capacity_space_separated_list_still_accepted(capsys):
    assert main(["capacity", "--density", "0.01", "0.1", "--json"]) == 0
    a = json.loads(capsys.readouterr().out)
    assert main(["capacity", "--density", "0.01,0.1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == a
