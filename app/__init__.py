"""schedlock: ShedLock's lock semantics over HTTP, on one Postgres table, using the database clock."""

from importlib.metadata import PackageNotFoundError, version

try:
    # One version source: the distribution's metadata (pyproject.toml). tests/project/test_versions.py checks that the
    # client, the Helm chart and the server agree.
    __version__ = version("schedlock-server")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
