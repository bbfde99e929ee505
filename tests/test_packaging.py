"""What a user installs: the wheel and the sdist build, install into a fresh virtual environment
and run; the documentation site builds with warnings as errors."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pyro_cl

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_and_sdist_build_install_in_a_fresh_venv_and_run(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    (wheel,) = dist.glob("pyro_cl-*.whl")
    (sdist,) = dist.glob("pyro_cl-*.tar.gz")
    assert pyro_cl.__version__ in wheel.name and pyro_cl.__version__ in sdist.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyro_cl/py.typed" in names and "pyro_cl/app/cli.py" in names
    assert not any(name.startswith(("tests/", "benchmarks/")) for name in names)
    assert any(name.endswith("LICENSE") for name in names)

    # torch and the rest come from this environment's site-packages, added as plain paths (so
    # the development checkout's editable hook does not run); pyro_cl only from the wheel
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=True)
    python = environment / "bin" / "python"
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    inside = environment / "lib" / version / "site-packages"
    (inside / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # --force-reinstall: the development install's metadata is on the added paths
    subprocess.run(
        [str(python), "-m", "pip", "install", "--no-deps", "--force-reinstall", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=600,
        env=env,
    )
    where = subprocess.run(
        [str(python), "-c", "import pyro_cl; print(pyro_cl.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert where.returncode == 0, where.stderr
    assert str(environment) in where.stdout
    listed = subprocess.run(
        [str(environment / "bin" / "pyro-cl"), "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert listed.returncode == 0, listed.stderr
    assert "split-mnist" in listed.stdout and "online methods" in listed.stdout


def test_the_documentation_site_builds_with_warnings_as_errors(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html"]
        + [str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    for page in ("index", "api", "architecture", "which_method", "tutorials/vcl_quickstart"):
        assert (tmp_path / "html" / f"{page}.html").stat().st_size > 0, page


#: Runs with matplotlib, scikit-learn and torchvision unimportable, as in a core-only install.
WITHOUT_EXTRAS = """
import sys
for name in ("matplotlib", "sklearn", "torchvision"):
    sys.modules[name] = None  # import raises ImportError, as if not installed
import torch
import pyro_cl
from pyro_cl.app import cli  # the command line imports; only what plots or downloads needs more
from pyro_cl.nn import BayesianMLP
x = torch.randn(40, 3)
learner = pyro_cl.VCL(BayesianMLP(3, [8], 2), epochs=2, progress=False, seed=0)
learner.observe((x, (x[:, 0] > 0).long()))
print(learner.evaluate((x, (x[:, 0] > 0).long()))["accuracy"])
from pyro_cl.data import split_digits
try:
    split_digits()
except ImportError as error:
    print(error)
"""


def test_the_core_install_fits_a_net_without_the_app_extras():
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    accuracy, message = done.stdout.strip().splitlines()
    assert 0.0 <= float(accuracy) <= 1.0
    assert message.startswith("the embedded 8x8 digits needs scikit-learn")
    assert '".[app]"' in message


def test_the_command_line_says_in_one_line_which_extra_is_missing():
    code = (
        "import sys\nsys.modules['sklearn'] = None\n"
        "from pyro_cl.app.cli import main\nmain(['run', '--methods', 'vcl'])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "pyro-cl run: the embedded 8x8 digits needs scikit-learn, which is not installed: "
        'pip install -e ".[app]" in a clone of pyro_cl (or pip install scikit-learn)'
    ]
