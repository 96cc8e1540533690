"""The distribution's version, in one place for `--version` and the package face."""

__version__ = "0.1.0"
