"""The package list, derived from the tree: every package under the three folders pyproject.toml describes,
installed under the names `tle`, `tle.lowering` (lowering/) and `tle.kernels` (kernels/). Listing them by hand
once left a package out of the wheel (tests/cpu/test_wheel.py builds and checks it)."""
from setuptools import find_packages, setup

FOLDERS = {"tle": "tle", "tle.lowering": "lowering", "tle.kernels": "kernels"}


def packages_under(name: str, folder: str) -> list[str]:
    return [name] + [f"{name}.{sub}" for sub in find_packages(folder)]


setup(packages=[p for name, folder in FOLDERS.items() for p in packages_under(name, folder)], package_dir=FOLDERS)
