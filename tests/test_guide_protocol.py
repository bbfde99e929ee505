"""The guide protocol (pyro_cl/guides/protocol.py) is what the core calls of a guide: every
family's guide follows it, and every member the library calls on a guide outside the guides
package is in it or in the diagonal-precision fitters' or Laplace propagation's blocks' list (so a new call cannot slip past the
protocol a family author reads)."""

import re
from pathlib import Path

import pytest
import torch

from pyro_cl import ContinualLearner
from pyro_cl.guides import FullCovariance, KroneckerFactored, LowRank, MeanField
from pyro_cl.guides.protocol import JOINT_GAUSSIAN_MEMBERS, MEAN_FIELD_MEMBERS, Guide
from pyro_cl.nn import BayesianMLP

ROOT = Path(__file__).resolve().parents[1] / "pyro_cl"


@pytest.mark.parametrize(
    "family", [MeanField(), FullCovariance(), LowRank(rank=2), KroneckerFactored()]
)
def test_every_family_builds_a_guide_that_follows_the_protocol(family):
    learner = ContinualLearner(BayesianMLP(3, [4], 2), guide=family, epochs=1, progress=False)
    learner.observe((torch.randn(8, 3), torch.randint(0, 2, (8,))))
    assert isinstance(learner.guide, Guide)


def _members_called_on_guides() -> set[str]:
    called = set()
    for path in ROOT.rglob("*.py"):
        if "guides" in path.relative_to(ROOT).parts:
            continue
        called |= set(re.findall(r"\bguide\.([a-z_]+)\b", path.read_text()))
    return called


def test_what_the_core_calls_on_a_guide_is_in_the_protocol():
    protocol = {name for name in dir(Guide) if not name.startswith("_")}
    protocol |= set(Guide.__annotations__)
    # a guide family's (its name, lineage), a Pyro autoguide's read while mapping it to a family
    # or reading its posterior (func, args, keywords, prototype_trace, _get_loc_and_scale), and
    # nn.Module's own methods
    not_a_guide_member = {"name", "lineage", "func", "args", "keywords", "prototype_trace",
                          "_get_loc_and_scale", "to", "named_parameters"}  # fmt: skip
    listed = protocol | set(MEAN_FIELD_MEMBERS) | set(JOINT_GAUSSIAN_MEMBERS)
    unlisted = _members_called_on_guides() - listed
    assert unlisted <= not_a_guide_member, sorted(unlisted - not_a_guide_member)
