"""The application built on the pyro_cl library: the ``pyro-cl`` command line, benchmark and
stream runs, presets, method recipes, experiment drivers and plots.

Nothing outside this package imports from it (``tests/test_architecture.py`` checks that): the
library underneath stands on its own.
"""
