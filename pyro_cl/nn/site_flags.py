"""Flags in a sample site's ``infer`` dict that the model sets and the guide reads.

Both sides import them from here, so neither imports the other for a constant.
"""

from __future__ import annotations

__all__ = ["OBSERVATION_FLAG", "STRUCTURED_FLAG"]

#: Sites with this key set are data, never latent variables, even when the model draws them
#: (prediction without targets).
OBSERVATION_FLAG = "observation"

#: Sites drawn from the model's own (posterior) conditional by the guide, with no variational
#: parameters of their own (IBP masks, H-IBP unit probabilities; see :mod:`pyro_cl.nn.structured`).
STRUCTURED_FLAG = "structured"
