# The two commands of the README. Both install what they need first.
PYTHON ?= python3

.PHONY: demo test lint docs mutations results

demo:
	$(PYTHON) -m pip install -e ".[app]"
	pyro-cl run --lr 0.003 --output results/demo

test:
	$(PYTHON) -m pip install -e ".[test]"
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	# two workers, one thread each (147 s against 244 s for one process on 2 cores, 523 tests);
	# tests handed out one by one, not by file: the notebooks of one file no longer queue on one
	# worker (1,134 tests: 313 s against 325 s by file, docs/lab/speed.md)
	OMP_NUM_THREADS=1 $(PYTHON) -m pytest -q -n 2 --dist worksteal --durations=20

# Every table of the results pages rendered from the committed run records (benchmarks/records/);
# the test suite fails when a committed table differs from its rendering.
results:
	$(PYTHON) -m pyro_cl.app.records render benchmarks/RESULTS.md docs/results.md docs/which_method.md docs/guide/drift.md README.md

lint:
	$(PYTHON) -m ruff check --fix .
	$(PYTHON) -m ruff format .

docs:
	$(PYTHON) -m pip install -e ".[docs]"
	$(PYTHON) -m sphinx -W --keep-going -b html docs docs/_build/html

# The mutation run over the methods' math (tests/mutations.py): too slow for every CI run, run
# it before a change to those modules lands.
mutations:
	$(PYTHON) -m pip install -e ".[test]"
	$(PYTHON) tests/mutations.py
