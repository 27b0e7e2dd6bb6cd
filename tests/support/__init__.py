"""Helpers the tests import (fixtures live in the conftest.py files): API calls, apps in process, server
processes, a Java ShedLock node, throwaway Postgres clusters, a faulty TCP proxy, the client's CLI."""
