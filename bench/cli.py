"""The two `schedlock` commands side by side: the Go binary's size, each command's start-up to its first request,
and `schedlock run -- true` end to end against a live server (docs/cli.md, "Speed and size").

    .venv/bin/python -m bench.cli                 # an embedded Postgres, 30 rounds
    .venv/bin/python -m bench.cli --database-url postgresql://... --rounds 100

Each round runs the Python and the Go command one after the other (alternating which goes first), so a machine
that gets busier weighs on both alike. Wall time is from spawning the process to its exit (or to the first request
reaching a listener that answers at once); CPU is the process's user + system time, from wait4.
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import database, target

ROOT = Path(__file__).resolve().parent.parent
GO_MODULE = ROOT / "integrations" / "go"
PYTHON_CLI = str(Path(sys.executable).with_name("schedlock"))
NOT_FOUND = b'{"error": {"code": "lock_not_found", "message": "no lock named \'x\'"}}'


def go_tool() -> str:
    found = shutil.which("go") or "/usr/local/go/bin/go"
    return found


def build(out: Path, goarch: str) -> Path:
    """The release build (docs/cli.md): static, no cgo, stripped."""
    binary = out / goarch / "schedlock"
    env = {**os.environ, "CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": goarch}
    command = [go_tool(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "./cmd/schedlock"]
    subprocess.run(command, cwd=GO_MODULE, env=env, check=True)
    return binary


def timed(argv: Sequence[str], env: dict[str, str]) -> tuple[float, float, int]:
    """Wall seconds from spawn to exit, CPU seconds (user + system), exit code."""
    started = time.perf_counter()
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, process.returncode


class FirstRequest:
    """A listener that answers every request at once with a 404 and notes when each arrived."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"
        self.arrived: list[float] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.socket.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    data += chunk
                self.arrived.append(time.perf_counter())
                head = f"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {len(NOT_FOUND)}"
                conn.sendall(head.encode() + b"\r\nConnection: close\r\n\r\n" + NOT_FOUND)

    def time_to_first_request(self, argv: Sequence[str], env: dict[str, str]) -> float:
        before = len(self.arrived)
        started = time.perf_counter()
        subprocess.run([*argv, "--url", self.url, "status", "x"], env=env, capture_output=True, check=False)
        assert len(self.arrived) == before + 1, "no request arrived"
        return self.arrived[-1] - started


def rounds(count: int, commands: dict[str, list[str]], measure: Callable[[list[str]], float]) -> dict[str, list[float]]:
    found: dict[str, list[float]] = {name: [] for name in commands}
    names = list(commands)
    for i in range(count):
        for name in names if i % 2 == 0 else reversed(names):
            found[name].append(measure(commands[name]))
    return found


def summary(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return f"{statistics.median(ordered) * 1000:.1f} ms (p90 {p90 * 1000:.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cli", description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", default=database.default_url(), help=database.HELP)
    parser.add_argument("--rounds", type=int, default=30, help="rounds of each measurement (default 30)")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}

    with tempfile.TemporaryDirectory(prefix="schedlock-bench-cli-") as tmp:
        binaries = {arch: build(Path(tmp), arch) for arch in ("amd64", "arm64")}
        print("| binary | size |\n|---|---|")
        for arch, binary in binaries.items():
            print(f"| linux/{arch} | {binary.stat().st_size / 1024 / 1024:.2f} MiB ({binary.stat().st_size} bytes) |")
        commands = {"python": [PYTHON_CLI], "go": [str(binaries["amd64"])]}

        listener = FirstRequest()
        first = rounds(args.rounds, commands, lambda argv: listener.time_to_first_request(argv, env))

        with database.database(args.database_url) as url:
            schema = f"bench_cli_{secrets.token_hex(4)}"
            target.run_sql(url, f"CREATE SCHEMA {schema}")
            with open(Path(tmp) / "server.log", "wb") as log:
                server = target.start_server(url, f"{schema}.shedlock", {}, log)
                try:
                    run_env = {**env, "SCHEDLOCK_URL": server.url}
                    cpu: dict[str, list[float]] = {name: [] for name in commands}

                    def run_true(argv: list[str]) -> float:
                        name = f"bench-cli-{secrets.token_hex(4)}"
                        wall, used, code = timed(
                            [*argv, "run", "--name", name, "--at-most", "1m", "--", "true"], run_env
                        )
                        assert code == 0, f"{argv} exited {code}"
                        cpu["python" if argv == commands["python"] else "go"].append(used)
                        return wall

                    ran = rounds(args.rounds, commands, run_true)
                finally:
                    target.stop_server(server)
                    target.drop_schema(url, schema)

    print(f"\n{args.rounds} rounds, {os.cpu_count()} CPUs\n")
    print("| | Python `schedlock` | Go `schedlock` |\n|---|---|---|")
    print(f"| start-up to first request | {summary(first['python'])} | {summary(first['go'])} |")
    print(f"| `run -- true`, end to end | {summary(ran['python'])} | {summary(ran['go'])} |")
    print(f"| `run -- true`, CPU | {summary(cpu['python'])} | {summary(cpu['go'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
