"""The client's version, from its distribution's metadata (client/pyproject.toml): the one place it is written."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("schedlock")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
