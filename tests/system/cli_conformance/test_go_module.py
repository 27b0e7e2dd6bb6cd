"""The Go module (integrations/go): go vet, gofmt, its tests under the race detector, `go install` of the command by
its module path, and the release binary: static, for linux/amd64 and linux/arm64, a few MB."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from tests.support.cli_impls import GO_MODULE, build_go
from tests.support.polyglot import require
from tests.support.schedulers_js_go import go_tool

pytestmark = pytest.mark.system  # go vet, go test -race, go install and cross-builds

MODULE_PATH = "github.com/schedlock/schedlock/integrations/go"
PT_INTERP = 3
MACHINES = {"amd64": 62, "arm64": 183}  # ELF e_machine: EM_X86_64, EM_AARCH64


def go(*args: str, env: dict[str, str] | None = None, cwd: Path = GO_MODULE) -> subprocess.CompletedProcess[str]:
    command = ["nice", "-n", "10", go_tool(), *args]
    full_env = {**os.environ, "GOFLAGS": "-mod=readonly", **(env or {})}
    return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=600, check=False)


def elf(path: Path) -> tuple[int, bool]:
    """The binary's ELF machine, and whether it names a dynamic loader (a PT_INTERP header: not static)."""
    data = path.read_bytes()
    assert data[:4] == b"\x7fELF" and data[4] == 2, "a 64-bit ELF file"
    (machine,) = struct.unpack_from("<H", data, 18)
    phoff, phentsize, phnum = struct.unpack_from("<Q", data, 32)[0], *struct.unpack_from("<HH", data, 54)
    types = [struct.unpack_from("<I", data, phoff + i * phentsize)[0] for i in range(phnum)]
    return machine, PT_INTERP in types


def test_go_vet_gofmt_and_the_module_path() -> None:
    assert (GO_MODULE / "go.mod").read_text().splitlines()[0] == f"module {MODULE_PATH}"
    vet = go("vet", "./...")
    assert vet.returncode == 0, vet.stdout + vet.stderr
    gofmt = subprocess.run([str(Path(go_tool()).with_name("gofmt")), "-l", "."], cwd=GO_MODULE, capture_output=True,
                           text=True, check=False)  # fmt: skip
    assert (gofmt.returncode, gofmt.stdout) == (0, ""), f"not gofmt-formatted: {gofmt.stdout}{gofmt.stderr}"


def test_the_module_tests_pass_under_the_race_detector() -> None:
    """The client package's own tests (a token file rotated under concurrent requests, errors, durations, paths) and
    the gocron adapter's, with -race (which needs cgo: gcc)."""
    require("gcc", "gcc")
    tested = go("test", "-race", "-count=1", "./...", env={"CGO_ENABLED": "1"})
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert f"ok  \t{MODULE_PATH}/schedlock" in tested.stdout, tested.stdout


def test_go_install_by_the_module_path(tmp_path: Path) -> None:
    """`go install MODULE/cmd/schedlock` as a user would, from a module that requires this one (replaced by the
    checkout: the module is not published yet), with GOFLAGS=-mod=mod and no proxy."""
    user = tmp_path / "user"
    user.mkdir()
    (user / "go.mod").write_text(
        f"module example.test/user\n\ngo 1.22\n\nrequire {MODULE_PATH} v0.0.0\n\nreplace {MODULE_PATH} => {GO_MODULE}\n"
    )
    (user / "tools.go").write_text(f'//go:build tools\n\npackage tools\n\nimport _ "{MODULE_PATH}/cmd/schedlock"\n')
    env = {"GOFLAGS": "-mod=mod", "GOPROXY": "off", "GOBIN": str(tmp_path / "bin"), "CGO_ENABLED": "0"}
    installed = go("install", f"{MODULE_PATH}/cmd/schedlock", env=env, cwd=user)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    version = subprocess.run([str(tmp_path / "bin" / "schedlock"), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith("schedlock ")
    # From the module itself, as the docs' `go install ./cmd/schedlock` in a checkout.
    env["GOBIN"] = str(tmp_path / "bin2")
    assert go("install", "./cmd/schedlock", env=env).returncode == 0
    assert (tmp_path / "bin2" / "schedlock").exists()


@pytest.mark.parametrize("goarch", ["amd64", "arm64"])
def test_the_release_binary_is_static_and_small(goarch: str, tmp_path: Path) -> None:
    binary, _ = build_go(tmp_path / "schedlock", goarch=goarch)
    machine, dynamic = elf(binary)
    assert machine == MACHINES[goarch] and not dynamic
    assert binary.stat().st_size < 10 * 1024 * 1024, binary.stat().st_size
