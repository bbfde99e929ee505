"""The mutation run's list stays applicable: every mutation's text occurs exactly once in the
file it mutates, and every test file it names exists (a refactor that moves an equation must
move its mutation too, or ``make mutations`` stops at it)."""

from pathlib import Path

import pytest

from tests.mutations import MUTATIONS, ROOT


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name)
def test_each_mutation_applies_to_the_tree(mutation):
    text = (ROOT / mutation.path).read_text()
    assert text.count(mutation.old) == 1, (
        f"{mutation.old!r} occurs {text.count(mutation.old)} times"
    )
    assert mutation.new != mutation.old
    for test_file in mutation.tests:
        assert Path(ROOT / test_file).is_file(), test_file
