"""The version of tle (pyproject.toml states the same for the package)."""
__version__ = "0.1.0"
