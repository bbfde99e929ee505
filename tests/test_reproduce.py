"""benchmarks/reproduce.py end to end on tiny schedules: pieces, resumption and the table."""

import json

import pytest

from tests.helpers import load_benchmark_script, write_fake_mnist


def test_reproduce_runs_pieces_resumes_and_regenerates_the_table(tmp_path, capsys):
    reproduce = load_benchmark_script("reproduce")
    data = write_fake_mnist(tmp_path / "data", num_train=120, num_test=40)
    out = tmp_path / "out"
    argv = [
        "--tables", "vcl", "generative",
        "--rows", "split-mnist vcl", "generative-mnist vcl",
        "--seeds", "0", "1",
        "--schedule", "tiny",
        "--data-root", str(data),
        "--output", str(out),
        "--ledger", str(tmp_path / "ledger.json"),  # never the repository's
        "--jobs", "2",
        "--device", "cpu",  # the option a GPU run passes (--device cuda), through every script
    ]  # fmt: skip
    assert reproduce.main(argv) == 0
    printed = capsys.readouterr().out
    assert "0 of 4 pieces done; running 4" in printed
    for row in ("vcl/split-mnist_vcl", "generative/generative-mnist_vcl"):
        for seed in (0, 1):
            piece = json.loads((out / "tiny" / row / f"seed{seed}" / "piece.json").read_text())
            assert piece["seconds"] > 0 and f"--seeds {seed}" in piece["command"]
            assert "--device cpu" in piece["command"]
    table = (out / "tiny" / "table.md").read_text()
    lines = [
        line for line in table.splitlines() if line.startswith("| vcl") or "generative |" in line
    ]
    assert len(lines) == 2
    for line in lines:
        assert "not run" not in line and "| 2 |" in line  # two seeds reported
    assert "| 97.0 |" in table  # the paper's split MNIST VCL number beside ours

    # finished pieces are kept and skipped
    assert reproduce.main(argv) == 0
    assert "4 of 4 pieces done; running 0" in capsys.readouterr().out

    # the plan, with an estimate per piece
    assert reproduce.main([*argv, "--dry-run"]) == 0
    plan = capsys.readouterr().out
    assert plan.count("[done]") == 4 and "reference step on cpu" in plan

    # the table of what has finished, with a row that has not: it runs nothing
    only = [*argv[:4], "split-mnist vcl", "split-mnist vcl-random", *argv[5:], "--table-only"]
    assert reproduce.main(only) == 0
    printed = capsys.readouterr().out
    assert "running 0" in printed and "not run" in printed
    assert not (out / "tiny" / "vcl" / "split-mnist_vcl-random").exists()
    assert not (tmp_path / "ledger.json").exists()  # a tiny schedule's numbers are not kept


def test_the_table_goes_between_the_markers_of_results(tmp_path):
    reproduce = load_benchmark_script("reproduce")
    results = tmp_path / "RESULTS.md"
    results.write_text("# Results\n\nbefore\n")
    reproduce.update_results("| a |\n", results)
    reproduce.update_results("| b |\n", results)
    text = results.read_text()
    assert text.startswith("# Results\n\nbefore\n") and "| b |" in text and "| a |" not in text
    assert text.count(reproduce.MARKERS[0]) == 1


def test_reproduce_refuses_rows_it_does_not_have(capsys):
    reproduce = load_benchmark_script("reproduce")
    with pytest.raises(SystemExit, match="no row of tables"):
        reproduce.main(["--tables", "vcl", "--rows", "no such row", "--dry-run"])


def test_each_row_gets_a_verdict_from_the_papers_number_and_our_seeds():
    script = load_benchmark_script("reproduce")
    assert script.paper_value("94.0 ± 0.8") == (94.0, 0.8)
    assert script.paper_value("≈82 (read off fig. 2)") == (82.0, 1.0)  # a figure's precision
    assert script.paper_value("n/a (thesis: CIFAR-10/100)") is None
    assert script.verdict("97.0", [97.4, 96.8], "paper") == "reproduced within noise"
    assert script.verdict("63.1", [97.0, 96.9], "paper") == "not reproduced (higher)"
    assert script.verdict("94.0 ± 0.8", [93.84], "short").endswith("at a shorter schedule")
    assert script.verdict("90", [], "paper") == "not run"
    # our mean's standard error, not the seeds' spread: 85.4 ± 4.5 over 3 seeds is not 94
    assert script.verdict("94", [79.2, 90.0, 87.0], "paper") == "not reproduced (lower)"
    assert script.verdict("fig. 4's upper bound (no number)", [97.5], "paper") == "no paper number"
    assert script.verdict("figs. 12 / 14 (no number printed)", [58.3], "paper") == "no paper number"


def _fake_results(folder, method, values):
    folder.mkdir(parents=True)
    runs = [{"method": method, "seed": seed, "wall_time_s": 60.0, "summary": {"ACC": value}}
            for seed, value in values.items()]  # fmt: skip
    (folder / "results.json").write_text(json.dumps({"runs": runs}))


def test_the_ledger_keeps_measured_runs_and_the_table_reads_them(tmp_path, capsys):
    script = load_benchmark_script("reproduce")
    ledger = tmp_path / "ledger.json"
    row = "split-cifar10 finetune (stand-in for CIFAR-10/100)"
    _fake_results(tmp_path / "a", "finetune", {0: 0.80, 1: 0.76})
    _fake_results(tmp_path / "b", "finetune", {2: 0.78})
    _fake_results(tmp_path / "c", "ewc", {0: 0.5})
    record = ["--tables", "vogn", "--rows", row, "--ledger", str(ledger), "--label", "1/58"]
    assert script.main([*record, "--record", str(tmp_path / "a"), str(tmp_path / "c")]) == 0
    assert script.main([*record, "--record", str(tmp_path / "b")]) == 0  # a third seed, later
    assert "recorded vogn/split-cifar10 finetune" in capsys.readouterr().out
    (entry,) = script.read_ledger(ledger)
    assert entry["seeds"] == {"0": 80.0, "1": 76.0, "2": 78.0} and entry["seconds"] == 180.0
    assert entry["schedule"] == "1/58" and len(entry["sources"]) == 2

    # the table reads the ledger, a line per schedule, with no results folder at hand
    shown = ["--tables", "vogn", "--rows", row, "--ledger", str(ledger), "--table-only",
             "--output", str(tmp_path / "none")]  # fmt: skip
    assert script.main(shown) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| vogn")]
    not_run, measured = lines  # what remains at the paper's schedule, then what ran at 1/58
    assert not_run.endswith("| not run | 0 | paper | not run | – |")
    assert measured.endswith("| 78.00 ± 2.00 | 3 | 1/58 | no paper number | 180 |")  # ddof 1

    # nothing to record is refused in one line, and so is a row that is not one
    with pytest.raises(SystemExit, match="no finished run of 'finetune'"):
        script.main([*record, "--record", str(tmp_path / "c")])
    with pytest.raises(SystemExit, match="--rows naming one row"):
        script.main(["--tables", "vogn", "--ledger", str(ledger), "--record", str(tmp_path)])


def test_the_from_scratch_row_reads_the_scratch_accuracies_of_a_forward_transfer_run(tmp_path):
    script = load_benchmark_script("reproduce")
    (row,) = [r for r in script.ROWS if r.name.startswith("split-cifar10 from scratch")]
    assert row.metric == "scratch" and "--forward-transfer" in row.command
    runs = [
        {"method": "finetune", "seed": 0, "wall_time_s": 60.0, "summary": {"ACC": 0.7},
         "details": {"scratch_accuracy": [0.9, 0.8, 0.7], "scratch_wall_time_s": 50.0}},
        {"method": "finetune", "seed": 1, "wall_time_s": 60.0, "summary": {"ACC": 0.7},
         "details": {}},  # no --forward-transfer: nothing to read
    ]  # fmt: skip
    (tmp_path / "results.json").write_text(json.dumps({"runs": runs}))
    (seed, (value, seconds)), *rest = script.run_values(row, tmp_path).items()
    assert not rest and seed == 0 and value == pytest.approx(80.0) and seconds == 50.0


def test_every_entry_of_the_repositorys_ledger_names_a_row():
    script = load_benchmark_script("reproduce")
    keys = {row.key for row in script.ROWS}
    entries = script.read_ledger(script.LEDGER)
    assert entries and all(entry["row"] in keys for entry in entries)
    for entry in entries:  # each says where its numbers come from, and has some
        assert entry["sources"] and (entry.get("seeds") or entry.get("summary"))


def test_a_finished_piece_is_recorded_once_and_the_table_keeps_it(tmp_path, capsys):
    script = load_benchmark_script("reproduce")
    ledger, out = tmp_path / "ledger.json", tmp_path / "out"
    argv = ["--tables", "baselines", "--rows", "split-mnist finetune", "--seeds", "0",
            "--schedule", "short", "--output", str(out), "--ledger", str(ledger)]  # fmt: skip
    (piece,) = script.plan(script.build_parser().parse_args(argv))
    _fake_results(piece.folder, "finetune", {0: 0.9})
    (piece.folder / "piece.json").write_text(json.dumps({"command": "python x", "seconds": 61.0}))
    script.record_pieces(ledger, [piece], "short")  # as main does when the piece finishes
    for _ in range(2):  # a table of what has finished records nothing again
        assert script.main([*argv, "--table-only"]) == 0
    (entry,) = script.read_ledger(ledger)
    assert entry["seeds"] == {"0": 90.0} and entry["seconds"] == 60.0  # the run's wall time
    assert "| 90.00 ± 0.00 | 1 | short |" in capsys.readouterr().out
    script.record_pieces(ledger, [piece], "tiny")  # a tiny schedule's numbers are never kept
    assert script.read_ledger(ledger) == [entry]


def test_the_dry_run_warns_when_other_work_slows_its_reference_step(monkeypatch):
    reproduce = load_benchmark_script("reproduce")
    monkeypatch.setattr(reproduce.os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    assert reproduce._busy_note() == ""
    monkeypatch.setattr(reproduce.os, "getloadavg", lambda: (3.0, 3.0, 3.0))
    assert "load average is 3.0" in reproduce._busy_note()
