"""Hostile micro-kernels against a real `tunefleet worker` and its real sandbox (bubblewrap).

Each task carries an extern C micro-kernel that attacks the worker's host the first time it is
called: it runs a shell command, connects to a listener this test runs, writes outside its
scratch directory, reads /etc/passwd (by #include, at build time, and by fopen, at run time),
forks without end, or allocates 64 GiB. An attack that fails ends in abort() with what it saw
on stderr (a real attacker would carry on quietly; aborting makes the sandbox's refusal the
trial's status). Each trial ends failed with a clear status and error text, and the test proves
that nothing happened outside: canary files untouched, the listener never connected, no
process of the sandbox's uid left, the worker alive and registered as sandboxed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import (CPU_A, TUNEFLEET, Service, descendants, dies_with_this_test, running, start_service,
                             submit, wait_for, wait_status)

from tunefleet.compiler import sandbox

pytestmark = pytest.mark.timeout(300)

DEVICE_KEY = "test-sandbox"
PROTOCOL = {"repeat": 1, "min_repeat_ms": 1, "cooldown_ms": 0, "timeout_s": 3}
#: The workload every attack rides on (M, N multiples of the micro-kernel's 4 x 16).
MATMUL = {"M": 8, "N": 16, "K": 4}
#: A line of the real /etc/passwd that the sandbox's own passwd does not have.
REAL_PASSWD_LINE = next((line for line in Path("/etc/passwd").read_text().splitlines()
                         if line and not line.startswith(("root:", "nobody:"))), "daemon:x:1:1")


def micro_kernel(attack: str, headers: str = "") -> dict:
    """A correct 4x16 micro-kernel whose first call runs the C statements `attack` first."""
    source = f"""#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
{headers}
static void attack(void) {{
{attack}
}}
void gemm_4x16(int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {{
  static int attacked;
  if (!attacked) {{ attacked = 1; attack(); }}
  for (int i = 0; i < 4; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int j = 0; j < 16; ++j) C[i * ldc + j] += A[i * lda + k] * B[k * ldb + j];
}}
"""
    return {"func": "gemm_4x16", "source": source, "mr": 4, "nr": 16}


def failed(attempt: str) -> str:
    """C: if `attempt` (an expression) is true, say what failed (with errno's text) and abort."""
    return f'  if ({attempt}) {{ perror("attack failed"); abort(); }}'


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str, _migrated_sqlite: Path) -> Iterator[Service]:
    """A server, a tuner and one sandboxed worker (the default: no --no-sandbox) of DEVICE_KEY."""
    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        pytest.skip(f"no sandbox on this host: {exc}")
    root = tmp_path_factory.mktemp("sandbox-service")
    shutil.copyfile(_migrated_sqlite, root / "tunefleet.db")
    service = start_service(root, f"sqlite:///{root / 'tunefleet.db'}", redis_url)
    try:
        service.start_tuner()
        service.start_worker("worker", CPU_A, device_key=DEVICE_KEY)
        wait_for(lambda: service.workers().get("test-worker", {}).get("state") == "idle", 90, "the worker")
        yield service
    finally:
        service.stop_all()


@pytest.fixture
def canaries(service: Service, tmp_path: Path) -> Iterator[dict[str, Path]]:
    """Files an attack tries to overwrite: one in the test's /tmp folder, one in the worker's
    TUNEFLEET_HOME (next to its database), one in this repository (read-only in the sandbox)."""
    home = Path(service.env["TUNEFLEET_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    files = {"tmp": tmp_path / "canary", "home": home / "canary",
             "repo": Path(__file__).with_name(f".sandbox-canary-{os.getpid()}")}
    for path in files.values():
        path.write_text("untouched\n")
    yield files
    files["repo"].unlink(missing_ok=True)


def run_attack(service: Service, mk: dict) -> dict:
    """Submit a one-trial task with micro-kernel `mk`; its trial once measured."""
    task = submit(service, 1, device_key=DEVICE_KEY, protocol=PROTOCOL, args={**MATMUL, "micro_kernel": mk})
    wait_status(service, task["id"], {"done", "failed"}, timeout_s=120)
    (trial,) = service.trials(task["id"])
    return trial


def assert_untouched(service: Service, canaries: dict[str, Path]) -> None:
    for path in canaries.values():
        assert path.read_text() == "untouched\n", path
    assert service.alive("worker")
    assert service.workers()["test-worker"]["state"] in ("idle", "measuring")

    def none_left() -> bool:  # a sandbox's processes end with it, within moments of its result
        return not [pid for pid in descendants(service.processes["worker"].pid)
                    if running(pid) and _uid(pid) == sandbox.SANDBOX_UID]

    wait_for(none_left, 10, f"the worker's processes of uid {sandbox.SANDBOX_UID} to end")


def _uid(pid: int) -> int | None:
    try:
        return next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                    if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None


def test_worker_registers_its_sandbox(service: Service) -> None:
    facts = service.workers()["test-worker"]["host"]
    assert facts["sandbox"].startswith("bubblewrap") and f"uid {sandbox.SANDBOX_UID}" in facts["sandbox"]


def test_system_call_runs_nothing_outside(service: Service, canaries: dict[str, Path]) -> None:
    command = f"echo pwned > {canaries['repo']}; echo pwned > {canaries['tmp']}; echo pwned > {canaries['home']}"
    trial = run_attack(service, micro_kernel(failed(f'system("{command}") != 0')))
    assert trial["status"] == "runtime_error" and "SIGABRT" in trial["error"], trial
    assert "attack failed" in trial["error"]
    assert_untouched(service, canaries)


def test_socket_to_a_listener_never_connects(service: Service, canaries: dict[str, Path]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        attack = f"""  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in to = {{0}};
  to.sin_family = AF_INET; to.sin_port = htons({port}); to.sin_addr.s_addr = htonl(0x7f000001);
{failed("connect(fd, (struct sockaddr*)&to, sizeof to) != 0")}"""
        trial = run_attack(service, micro_kernel(attack, "#include <sys/socket.h>\n#include <netinet/in.h>\n"
                                                         "#include <arpa/inet.h>"))
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):  # nobody ever connected
            listener.accept()
    assert trial["status"] == "runtime_error" and "Connection refused" in trial["error"], trial
    assert_untouched(service, canaries)


def test_writes_outside_its_directory_fail(service: Service, canaries: dict[str, Path]) -> None:
    attack = "\n".join(failed(f'fopen("{path}", "w") == NULL') for path in
                       (canaries["repo"], canaries["home"], canaries["tmp"]))
    trial = run_attack(service, micro_kernel(attack))
    assert trial["status"] == "runtime_error" and "attack failed" in trial["error"], trial
    assert "Read-only file system" in trial["error"]  # the repository: visible, read-only
    assert_untouched(service, canaries)


def test_include_of_etc_passwd_shows_no_host_file(service: Service, canaries: dict[str, Path]) -> None:
    trial = run_attack(service, micro_kernel("", '#include "/etc/passwd"'))
    assert trial["status"] == "compile_error", trial
    assert "passwd" in trial["error"] and REAL_PASSWD_LINE not in trial["error"]
    home = service.env["TUNEFLEET_HOME"]
    assert home not in trial["error"] and str(Path.home()) + "/" not in trial["error"]  # host paths cut
    assert len(trial["error"]) < sandbox.OUTPUT_LIMIT + 500
    assert_untouched(service, canaries)


def test_reading_host_files_at_run_time_sees_the_sandboxs_own(service: Service,
                                                              canaries: dict[str, Path]) -> None:
    attack = f"""  char text[4096] = {{0}};
  FILE* f = fopen("/etc/passwd", "r");
  if (f) {{ fread(text, 1, sizeof text - 1, f); fprintf(stderr, "passwd: %s\\n", text); }}
{failed(f'fopen("{canaries["home"]}", "r") == NULL')}"""
    trial = run_attack(service, micro_kernel(attack))
    assert trial["status"] == "runtime_error", trial
    assert f"nobody:x:{sandbox.SANDBOX_UID}" in trial["error"] and REAL_PASSWD_LINE not in trial["error"]
    assert "No such file or directory" in trial["error"]  # TUNEFLEET_HOME is an empty tmpfs there
    assert_untouched(service, canaries)


def test_fork_bomb_times_out_and_leaves_nothing(service: Service, canaries: dict[str, Path]) -> None:
    trial = run_attack(service, micro_kernel("  for (;;) fork();", "#include <unistd.h>"))
    assert trial["status"] == "timeout", trial
    assert_untouched(service, canaries)


def test_allocating_64_gib_fails_in_the_candidate(service: Service, canaries: dict[str, Path]) -> None:
    attack = f"""  size_t size = (size_t)64 << 30;
  char* p = malloc(size);
{failed("p == NULL")}
  for (size_t i = 0; i < size; i += 4096) p[i] = 1;"""
    trial = run_attack(service, micro_kernel(attack))
    assert trial["status"] == "runtime_error" and "Cannot allocate memory" in trial["error"], trial
    assert_untouched(service, canaries)



def test_worker_that_cannot_sandbox_refuses_to_start_unless_told(service: Service) -> None:
    env = {**service.env, "TUNEFLEET_BWRAP": "/nonexistent/bwrap", "TUNEFLEET_WORKER_TOKEN": service.worker_token}
    args = [TUNEFLEET, "worker", "--redis", service.redis_url, "--server", service.url, "--cpus", CPU_A,
            "--device-key", "test-unsandboxed", "--name", "test-unsandboxed", "--heartbeat-s", "0.5"]
    refused = subprocess.run(args, env=env, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2
    assert "cannot sandbox candidates: TUNEFLEET_BWRAP=/nonexistent/bwrap" in refused.stderr
    assert "test-unsandboxed" not in service.workers()
    service.processes["unsandboxed"] = subprocess.Popen(dies_with_this_test([*args, "--no-sandbox"]), env=env,
                                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        worker = wait_for(lambda: service.workers().get("test-unsandboxed"), 60, "the --no-sandbox worker")
        assert worker["host"]["sandbox"] == sandbox.UNSANDBOXED
    finally:
        service.processes["unsandboxed"].terminate()
        service.processes["unsandboxed"].wait(60)
