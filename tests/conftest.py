import pyro
import pytest


@pytest.fixture(autouse=True)
def fresh_pyro_state():
    pyro.clear_param_store()
    pyro.set_rng_seed(0)
    yield
