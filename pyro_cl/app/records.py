"""Runs kept as data, and the pages rendered from them.

A benchmark that produces a number for the results page writes a small **run record**: what ran
(the command, the commit, the seeds, the schedule, the data), where (the machine, the date), the
choice it made on validation (the grid, every validation score, the setting chosen) and what it
measured on the test sets, per row and seed (and per task where the row has tasks), with the bytes
each row keeps between tasks. Records are JSON files under ``benchmarks/records/``: small, no
checkpoints and no arrays beyond a task's numbers.

A page holds tables between markers::

    <!-- record: demo-protocol -->
    ...the table, rendered...
    <!-- /record -->

``python -m pyro_cl.app.records render PAGE...`` (``make results``) rewrites every such block
from the record of that name; ``check`` (the test suite's) fails when a committed block differs
from its rendering. One number in a sentence or an advice table is quoted the same way, inline::

    ACC <!-- cell: demo-protocol / VCL / ACC -->71.14 ± 4.20<!-- /cell -->

A number on a page that has a record is therefore never typed by hand. Each cell is the mean ±
the sample standard deviation (ddof 1) over the seeds, which the table names. A paper's number
is typed, checked against the paper's text, and marked with its source::

    <!-- paper: Kurle et al. 2020, table 1 -->−0.216 ± 0.016<!-- /paper -->
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "RECORDS",
    "check_pages",
    "current_commit",
    "hand_written_tables",
    "load_record",
    "make_record",
    "render_cell",
    "render_page",
    "render_table",
    "typed_numbers",
    "write_record",
]

#: Where the records behind the results page are committed.
RECORDS = Path(__file__).resolve().parents[2] / "benchmarks" / "records"
#: The format of a record file.
FORMAT = "pyro_cl.record/1"
_BLOCK = re.compile(r"(<!-- record: ([\w.-]+) -->\n)(.*?)(<!-- /record -->)", re.DOTALL)
#: A number typed in a table's cell: the whole cell a number (``81``, ``-0.5 ± 0.1``, ``12%``), or
#: a decimal number within it (``at 95.1``).
_TYPED = re.compile(r"^\s*[-−+]?\d[\d,]*(\.\d+)?\s*(%|±.*)?\s*$|\d\.\d")
#: One number of a record in prose or an advice table: ``<!-- cell: NAME / ROW / METRIC -->``.
_CELL = re.compile(r"(<!-- cell: ([\w.-]+) / (.+?) / (.+?) -->)(.*?)(<!-- /cell -->)")
#: A fenced code block: settings in an example, not numbers quoted from a run.
_FENCED = re.compile(r"^```.*?^```", re.DOTALL | re.MULTILINE)
#: Inline code (`init_beta=0.999`): a setting, like a fenced block's.
_INLINE_CODE = re.compile(r"`[^`\n]+`")
#: A paper's number, typed with its source: ``<!-- paper: SOURCE -->NUMBER<!-- /paper -->``.
_PAPER = re.compile(r"<!-- paper: [^>]+? -->.*?<!-- /paper -->", re.DOTALL)


def current_commit() -> str:
    """The checkout's commit (with ``+dirty`` when files differ from it), or ``unknown``."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("+dirty" if dirty else "")


def _machine() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def make_record(
    name: str,
    *,
    command: str,
    seeds: Sequence[int],
    schedule: Mapping[str, Any],
    data: str,
    rows: Mapping[str, Mapping[int, Mapping[str, Any]]],
    metrics: Sequence[str],
    selection: Mapping[str, Any] | None = None,
    storage_bytes: Mapping[str, int] | None = None,
    notes: str = "",
    commit: str | None = None,
    digits: int = 2,
) -> dict[str, Any]:
    """A run record (module docstring).

    :param rows: ``{row label: {seed: {metric: value, ...}}}``, test-set numbers of the chosen
        setting of each row; a value may also be a list (e.g. per task).
    :param metrics: the metrics a table shows, in order (keys of each seed's numbers).
    :param selection: ``{row label: {"grid": [...], "validation": {setting: {seed: score}},
        "chosen": setting}}`` for rows whose setting was chosen on validation.
    :param storage_bytes: per row, the bytes it keeps between tasks (memory, context, moments).
    :param digits: decimals a table shows.
    :param commit: the commit the run's code was at (:func:`current_commit` taken when the run
        started; default: now).
    :raises ValueError: for a row that lacks a seed or a metric, or seeds given twice.
    """
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct, got {list(seeds)}")
    for label, per_seed in rows.items():
        if sorted(per_seed) != sorted(seeds):
            raise ValueError(f"row {label!r} has seeds {sorted(per_seed)}, not {sorted(seeds)}")
        for seed, numbers in per_seed.items():
            missing = [m for m in metrics if m not in numbers]
            if missing:
                raise ValueError(f"row {label!r}, seed {seed}: no {missing}")
    return {
        "format": FORMAT,
        "name": name,
        "command": command,
        "commit": _commits(rows, commit or current_commit()),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": _machine(),
        "seeds": list(seeds),
        "schedule": dict(schedule),
        "data": data,
        "metrics": list(metrics),
        "rows": {label: {str(s): dict(v) for s, v in per.items()} for label, per in rows.items()},
        "selection": dict(selection or {}),
        "storage_bytes": dict(storage_bytes or {}),
        "notes": notes,
        "digits": digits,
    }


def write_record(record: Mapping[str, Any], folder: str | os.PathLike = RECORDS) -> Path:
    """Write ``record`` as ``<folder>/<name>.json``; the path written."""
    path = Path(folder) / f"{record['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    return path


def _commits(rows: Mapping[str, Mapping[Any, Mapping[str, Any]]], commit: str) -> str:
    """The commits that ran the rows' seeds (kept with each run's numbers, as
    :func:`~pyro_cl.app.selection.kept_numbers` keeps them), in order of first use, then
    ``commit`` where a run kept none."""
    ran = [numbers.get("commit") for per_seed in rows.values() for numbers in per_seed.values()]
    # a run kept from a record (restore_kept_runs) names the record's commits, comma-separated
    named = list(dict.fromkeys(one for c in ran if c for one in c.split(", ")))
    if not all(ran) and commit not in named:
        named.append(commit)
    return ", ".join(named)


def load_record(name: str, folder: str | os.PathLike = RECORDS) -> dict[str, Any]:
    """The record ``name`` from ``folder``.

    :raises FileNotFoundError: naming the file; :raises ValueError: for another format."""
    path = Path(folder) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"no record {name!r}: {path} does not exist")
    record = json.loads(path.read_text())
    if record.get("format") != FORMAT:
        raise ValueError(f"{path} is not a record of format {FORMAT}")
    return record


def _cell(values: list[float], digits: int) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def _short(commit: str) -> str:
    """A commit's first 12 characters, with ``+dirty`` where the tree had changes not committed."""
    return commit[:12] + ("+dirty" if commit.endswith("+dirty") else "")


def render_table(record: Mapping[str, Any]) -> str:
    """The record's table: a row per row label (its chosen setting beside it where settings were
    chosen on validation, and the bytes it keeps where the record counts them), a column per
    metric (mean ± sample sd, ddof 1, over the named seeds), and the provenance line under it."""
    metrics, seeds = record["metrics"], record["seeds"]
    digits = record.get("digits", 2)
    storage = record.get("storage_bytes", {})
    selection = record.get("selection", {})
    header = ["row", *(["chosen on validation"] if selection else []), *metrics]
    header += ["bytes kept"] if storage else []
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(["---"] * len(header)) + " |"]
    for label, per_seed in record["rows"].items():
        cells = [label]
        if selection:
            cells.append(str(selection.get(label, {}).get("chosen", "—")))
        for metric in metrics:
            values = [per_seed[str(s)][metric] for s in seeds]
            cells.append(
                "—" if any(v is None for v in values) else _cell([float(v) for v in values], digits)
            )
        if storage:
            cells.append(f"{storage[label]:,}" if label in storage else "—")
        lines.append("| " + " | ".join(cells) + " |")
    spread = (
        f"mean ± sample sd (ddof 1) over seeds {', '.join(map(str, seeds))}"
        if len(seeds) > 1
        else f"seed {seeds[0]} alone"
    )
    lines.append("")
    lines.append(
        f"{spread}; record `{record['name']}` "
        f"(commit {', '.join(_short(c) for c in record['commit'].split(', '))}, {record['date']}, "
        f"{record['machine']['cpus']} CPUs): "
        f"`{record['command']}`"
    )
    return "\n".join(lines) + "\n"


def render_cell(record: Mapping[str, Any], row: str, metric: str) -> str:
    """One cell of the record's table (mean ± sample sd over its seeds), for a sentence or an
    advice table; a row or metric the record lacks raises, naming what it has."""
    if row not in record["rows"]:
        raise KeyError(f"record {record['name']!r} has no row {row!r}: {list(record['rows'])}")
    if metric not in record["metrics"]:
        raise KeyError(f"record {record['name']!r} has no metric {metric!r}: {record['metrics']}")
    values = [record["rows"][row][str(s)][metric] for s in record["seeds"]]
    if any(v is None for v in values):
        return "—"
    return _cell([float(v) for v in values], record.get("digits", 2))


def render_page(text: str, folder: str | os.PathLike = RECORDS) -> str:
    """``text`` with every record block, and every cell quoted from a record, rendered."""
    text = _BLOCK.sub(
        lambda m: m.group(1) + render_table(load_record(m.group(2), folder)) + m.group(4), text
    )
    return _CELL.sub(
        lambda m: (
            m.group(1)
            + render_cell(load_record(m.group(2), folder), m.group(3), m.group(4))
            + m.group(6)
        ),
        text,
    )


def check_pages(
    pages: Sequence[str | os.PathLike], folder: str | os.PathLike = RECORDS
) -> list[str]:
    """The pages whose record blocks differ from their rendering (empty: all agree)."""
    stale = []
    for page in pages:
        text = Path(page).read_text()
        if render_page(text, folder) != text:
            stale.append(str(page))
    return stale


#: A page's hand-written lab notes follow this marker (not checked by :func:`typed_numbers`).
LAB_NOTES = "<!-- lab notes -->"
#: Metrics that are timings (not checked by :func:`typed_numbers`).
TIMINGS = ("seconds", "s/step")


def typed_numbers(
    page: str | os.PathLike, folder: str | os.PathLike = RECORDS, every_record: bool = False
) -> list[str]:
    """Numbers a record renders (a cell's mean, to its digits) that the page's prose repeats
    outside the record's blocks: typed by hand, they go stale when the record is re-run.
    ``[]`` when the prose repeats none. The records checked are those the page renders, or with
    ``every_record`` all of ``folder``'s (for a page that quotes without rendering). Timings
    (:data:`TIMINGS`) are left out: small numbers such as 2.17 s recur by coincidence, and no
    claim rests on one; so are code, fenced or inline (an example's settings), a paper's number
    marked with its source (module docstring), and what follows a :data:`LAB_NOTES` marker
    (hand-written notes of other runs, awaiting records of their own).
    """
    text = Path(page).read_text().split(LAB_NOTES)[0]
    names = {match.group(2) for match in _BLOCK.finditer(text)}
    names |= {match.group(2) for match in _CELL.finditer(text)}
    if every_record:
        names |= {path.stem for path in Path(folder).glob("*.json")}
    prose = _CELL.sub("", _BLOCK.sub("", text))
    prose = _INLINE_CODE.sub("", _FENCED.sub("", prose))  # code is not prose
    prose = _PAPER.sub("", prose)  # a paper's number, quoted with its source
    typed = []
    for name in sorted(names):
        record = load_record(name, folder)
        digits = record.get("digits", 2)
        for per_seed in record["rows"].values():
            for metric in record["metrics"]:
                values = [per_seed[str(s)][metric] for s in record["seeds"]]
                if metric in TIMINGS or any(v is None for v in values):
                    continue
                shown = f"{statistics.mean(float(v) for v in values):.{digits}f}"
                if re.search(rf"(?<![\d.]){re.escape(shown)}(?![\d])", prose):
                    typed.append(f"{Path(page).name}: {shown} (record {name})")
    return typed


def hand_written_tables(page: str | os.PathLike) -> list[str]:
    """The Markdown tables of ``page`` outside its record blocks that type a number by hand (a
    body cell after the first column that is a number, or holds a decimal one, once the quoted
    cells are taken out: "200 points a task" describes a row, "95.1" measures it), each as
    ``page:line`` of its header: a results page whose every table is rendered from a record, or
    made of cells quoted from records, has none."""
    text = Path(page).read_text()
    blank = _BLOCK.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # blocks out, lines kept
    lines = _CELL.sub("", blank).splitlines()
    found = []
    for number, (line, below) in enumerate(zip(lines, lines[1:], strict=False), start=1):
        if not (line.startswith("|") and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", below.strip())):
            continue
        body = []
        for row in lines[number + 1 :]:
            if not row.startswith("|"):
                break
            body.append(row)
        if any(_TYPED.search(cell) for row in body for cell in row.split("|")[2:]):
            found.append(f"{Path(page).name}:{number}")
    return found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="render or check pages from run records")
    parser.add_argument("action", choices=["render", "check"])
    parser.add_argument("pages", nargs="+", type=Path)
    args = parser.parse_args(argv)
    if args.action == "render":
        for page in args.pages:
            page.write_text(render_page(page.read_text()))
        return
    stale = check_pages(args.pages)
    if stale:
        sys.exit(f"pages differ from their records (run `make results`): {', '.join(stale)}")


if __name__ == "__main__":
    main()
