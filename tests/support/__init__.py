"""Helpers the tests import (fixtures live in the conftest.py files; a test module imports neither another test
module nor a conftest): API calls, apps in process, server processes, a Java ShedLock node, throwaway Postgres
clusters, a faulty TCP proxy, the client's CLI, captured logs, /metrics scrapes, the OpenAPI document, the Helm
chart, libfaketime and the polyglot examples' programs."""
