"""Supervision of the embedded service's processes by supervisord (the ``supervisor`` package).

:class:`Supervisor` writes a supervisord configuration for a list of :class:`Program`\\ s, runs
supervisord as a child of this process and drives it over its XML-RPC interface (a Unix
socket in a private directory, with a random password). supervisord does the supervising:

- a program that dies after it has run ``start_s`` seconds is restarted at once; its log
  (``<logs>/supervisord.log``) says why it died ("exited: worker (terminated by SIGKILL; not
  expected)");
- a program that dies within ``start_s`` of starting is restarted after a backoff of 1, 2,
  3 ... seconds, and after ``retries`` such tries it is given up on (state FATAL), which
  :meth:`Supervisor.failure` reports in one sentence;
- stopping sends SIGTERM to the program's process group and SIGKILL to the group after its
  ``stop_timeout_s``.

No process outlives this one: supervisord gets SIGTERM when this process ends, however it ends
(``kill -9`` included), and stops its programs; each program gets SIGTERM if supervisord itself
is killed (:mod:`tunefleet.tuner.lifeline`), and their own helpers die with them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys
import time
import xmlrpc.client
from pathlib import Path

from supervisor.xmlrpc import Faults, SupervisorTransport

from tunefleet.tuner import lifeline

__all__ = ["Program", "Supervisor", "SupervisionError"]

#: supervisord's log lines about a program's end: "exited: NAME (REASON)", "gave up: NAME ...".
_EVENT = re.compile(r"\b(?P<what>exited|gave up): (?P<name>[\w-]+) (?P<rest>.*)$")


class SupervisionError(RuntimeError):
    """supervisord did not start, or a program could not be started or stopped."""


@dataclasses.dataclass(frozen=True)
class Program:
    """One supervised program: `name` (letters, digits, ``-``), `argv` (the command), and
    `stop_timeout_s`, the seconds it gets after SIGTERM before its process group is killed."""

    name: str
    argv: list[str]
    stop_timeout_s: float = 30.0


class Supervisor:
    """supervisord over `programs`, each logging to ``<logs>/<name>.log``, with environment
    `env`; its socket and configuration go to `run_dir` (a private directory with a short
    path, which the caller removes). `start_s`: seconds a program must run to count as started; `retries`: restarts
    of a program that keeps dying within `start_s` before it is given up on. Programs start
    only when asked (:meth:`start_program`), in the order the caller needs; supervisord's own
    shutdown stops them in the reverse of the order of `programs`."""

    def __init__(self, programs: list[Program], logs: Path, env: dict[str, str], run_dir: Path, *,
                 start_s: float = 30.0, retries: int = 3) -> None:
        self.programs = {p.name: p for p in programs}
        self.logs = logs
        self.env = env
        self.start_s = start_s
        self.retries = retries
        self.log = logs / "supervisord.log"
        self.run_dir = run_dir
        self._process: subprocess.Popen | None = None
        self._rpc_address: tuple[str, str] | None = None
        self._log_offset = 0

    # --- configuration ---------------------------------------------------------------

    def _config(self, socket: Path, password: str) -> str:
        def value(text: str) -> str:  # supervisord expands %(name)s in values
            return text.replace("%", "%%")

        lines = [
            "[unix_http_server]", f"file={value(str(socket))}", "chmod=0700", "username=tunefleet",
            f"password={password}", "",
            "[supervisord]", "nodaemon=true", "silent=true", f"logfile={value(str(self.log))}",
            "logfile_maxbytes=10MB", "logfile_backups=2", f"pidfile={value(str(socket.with_suffix('.pid')))}",
            f"childlogdir={value(str(self.logs))}", "",
            "[rpcinterface:supervisor]", "supervisor.rpcinterface_factory = supervisor.rpcinterface:make_main_rpcinterface",
            "",
        ]
        for priority, program in enumerate(self.programs.values(), start=1):
            lines += [
                f"[program:{program.name}]",
                f"command={value(shlex.join(lifeline.command(program.argv)))}",
                f"priority={priority}", "autostart=false", "autorestart=true",
                f"startsecs={self.start_s:g}", f"startretries={self.retries}",
                "stopsignal=TERM", f"stopwaitsecs={program.stop_timeout_s:g}",
                "stopasgroup=true", "killasgroup=true", "redirect_stderr=true",
                f"stdout_logfile={value(str(self.logs / (program.name + '.log')))}",
                "stdout_logfile_maxbytes=50MB", "stdout_logfile_backups=2", "",
            ]
        return "\n".join(lines)

    # --- supervisord -----------------------------------------------------------------

    def start(self, timeout_s: float = 30.0) -> None:
        """Run supervisord (it dies with this process) and wait until it answers;
        SupervisionError if it does not."""
        self.logs.mkdir(parents=True, exist_ok=True)
        socket, password = self.run_dir / "supervisor.sock", secrets.token_hex(16)
        conf = self.run_dir / "supervisord.conf"
        conf.write_text(self._config(socket, password))
        self._log_offset = self.log.stat().st_size if self.log.exists() else 0
        with (self.logs / "supervisord.err").open("ab") as errors:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "supervisor.supervisord", "-c", str(conf)], env=self.env,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                # its own session: a Ctrl-C in the terminal reaches only this process, which
                # then stops the service in order
                start_new_session=True,
                preexec_fn=functools.partial(lifeline.die_with_parent, signal.SIGTERM, alive=os.getpid()),
            )
        self._rpc_address = (f"unix://{socket}", password)
        deadline = time.monotonic() + timeout_s
        while True:
            if self._process.poll() is not None:
                raise SupervisionError(f"supervisord exited with status {self._process.returncode}; "
                                       f"see {self.logs / 'supervisord.err'}")
            try:
                self._call("getState")
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise SupervisionError(f"supervisord did not answer within {timeout_s:g} s") from None
                time.sleep(0.1)

    def start_program(self, name: str) -> None:
        """Start program `name` (supervisord keeps it running from then on)."""
        try:
            self._call("startProcess", name, False)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode != Faults.ALREADY_STARTED:
                raise SupervisionError(f"could not start the {name}: {fault.faultString}") from fault

    def state(self, name: str) -> str:
        """supervisord's state of program `name`: STOPPED, STARTING, RUNNING, BACKOFF, STOPPING,
        EXITED, FATAL or UNKNOWN."""
        return str(self._call("getProcessInfo", name)["statename"])

    def failure(self) -> str | None:
        """Why the service cannot go on, if it cannot: supervisord died, or a program kept dying
        right after it started and was given up on."""
        if self._process is None or self._process.poll() is not None:
            status = self._process.returncode if self._process else None
            return f"supervisord exited with status {status}; see {self.log}"
        try:
            infos = self._call("getAllProcessInfo")
        except OSError as exc:
            return f"supervisord does not answer: {exc}"
        for info in infos:
            if info["statename"] == "FATAL":
                return (f"the {info['name']} died within {self.start_s:g} s of starting {self.retries + 1} times "
                        f"in a row; gave up. Its log: {self.logs / (info['name'] + '.log')}")
        return None

    def events(self) -> list[tuple[str, str]]:
        """(program, what happened) for each end of a program that supervisord logged since the
        last call, e.g. ("worker", "exited (terminated by SIGKILL; not expected)")."""
        try:
            with self.log.open("rb") as log:
                if os.fstat(log.fileno()).st_size < self._log_offset:  # rotated
                    self._log_offset = 0
                log.seek(self._log_offset)
                text = log.read()
        except OSError:
            return []
        complete = text.rfind(b"\n") + 1
        self._log_offset += complete
        out = []
        for line in text[:complete].decode(errors="replace").splitlines():
            match = _EVENT.search(line)
            if match and match["name"] in self.programs:
                out.append((match["name"], f"{match['what']} {match['rest']}"))
        return out

    def stop_program(self, name: str) -> None:
        """Stop program `name` (SIGTERM, then SIGKILL to its group after its stop timeout) and
        wait for it; nothing if it is not running."""
        try:
            self._call("stopProcess", name, True)
        except xmlrpc.client.Fault as fault:
            if fault.faultCode != Faults.NOT_RUNNING:
                raise SupervisionError(f"could not stop the {name}: {fault.faultString}") from fault

    def shutdown(self) -> None:
        """Stop supervisord (and with it any program still running)."""
        if self._process is not None and self._process.poll() is None:
            try:
                self._call("shutdown")
            except (OSError, xmlrpc.client.Fault):
                self._process.terminate()
            try:
                self._process.wait(max((p.stop_timeout_s for p in self.programs.values()), default=30) + 10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        self._process = None

    def _call(self, method: str, *args: object) -> object:
        """supervisord's XML-RPC method `method` (a connection each call: one that failed
        cannot be reused)."""
        assert self._rpc_address is not None, "supervisord is not started"
        url, password = self._rpc_address
        proxy = xmlrpc.client.ServerProxy("http://localhost", transport=SupervisorTransport("tunefleet", password, url))
        return getattr(proxy.supervisor, method)(*args)
