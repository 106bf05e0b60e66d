"""Python client of the tunefleet service: submit a tuning task, wait for it, download the
tuned kernel and call it.

    client = tunefleet.Client("http://127.0.0.1:8000", token)
    task = client.submit("matmul", {"M": 64, "N": 64, "K": 64})   # device_key: the only live pool
    client.wait(task["id"])
    kernel = client.load(task["id"])
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

#: Seconds a multi-target download may take: the server builds it on request.
MULTI_TARGET_TIMEOUT_S = 600.0

if TYPE_CHECKING:
    from tunefleet.base.load import Kernel

FINAL_STATUSES = frozenset({"done", "failed", "cancelled"})


class ServiceError(RuntimeError):
    """The service refused a request; `detail` is its JSON explanation."""

    def __init__(self, status_code: int, detail: Any) -> None:
        super().__init__(f"HTTP {status_code}: {format_detail(detail)}")
        self.status_code = status_code
        self.detail = detail


class IntegrityError(RuntimeError):
    """A downloaded artifact does not match its published sha256."""


class ServerUnreachable(ConnectionError):
    """No tunefleet server answered at `url` (connection refused, unknown host, timeout);
    the message names the URL and the reason."""

    def __init__(self, url: str, reason: Exception) -> None:
        super().__init__(f"cannot reach the tunefleet server at {url}: {reason or type(reason).__name__}")
        self.url = url


def format_detail(detail: Any) -> str:
    """A 422 body's field errors as 'args.M: message; ...', anything else as text."""
    if isinstance(detail, list):
        parts = []
        for error in detail:
            loc = [str(p) for p in error.get("loc", []) if p not in ("body", "query", "path")]
            parts.append(f"{'.'.join(loc) or 'request'}: {error.get('msg', error)}")
        return "; ".join(parts)
    return str(detail)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


class Client:
    """A connection to a tunefleet server at `url`, authenticating with a `user` token
    (needed to submit, cancel and download; reads need none). Every request raises
    ServerUnreachable when no server answers at `url`, ServiceError when it refuses."""

    def __init__(self, url: str = "http://127.0.0.1:8000", token: str | None = None, timeout_s: float = 30.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=url.rstrip("/") + "/api/v1", headers=headers, timeout=timeout_s
        )

    def close(self) -> None:
        """Close the underlying connections."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _reaching(self) -> Iterator[None]:
        """Turns httpx's transport errors into ServerUnreachable naming the server's URL."""
        try:
            yield
        except httpx.TransportError as exc:
            raise ServerUnreachable(self.url, exc) from exc

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        with self._reaching():
            response = self._http.request(method, path, **kwargs)
        if response.is_error:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise ServiceError(response.status_code, detail)
        return response.json()

    def submit(
        self,
        op: str,
        args: dict[str, Any] | None = None,
        *,
        device_key: str | None = None,
        target: str | None = None,
        trials: int = 64,
        wall_time_s: float | None = None,
        early_stopping: int | None = None,
        protocol: dict[str, Any] | None = None,
        reuse: bool = False,
    ) -> dict[str, Any]:
        """Submit a tuning task for operator `op` with `args` (for a tensor expression:
        `op="custom", args={"te": ...}`), measured on workers of `device_key` (default: the
        only pool of live workers of the target's kind), generating code for `target`
        (default, or a kind alone like "cpu": the best target the key's hosts execute; the
        task's "target" says which); returns the task. Raises ServiceError naming the
        invalid field (a target the key's hosts cannot execute is a 422 on `target`)."""
        body: dict[str, Any] = {
            "op": op,
            "args": args or {},
            "target": target,
            "device_key": device_key,
            "budget": {"trials": trials, "wall_time_s": wall_time_s, "early_stopping": early_stopping},
            "reuse": reuse,
        }
        if protocol is not None:
            body["protocol"] = protocol
        return self._request("POST", "/tasks", json=body)

    def get(self, task_id: int) -> dict[str, Any]:
        """The task with its status and progress."""
        return self._request("GET", f"/tasks/{task_id}")

    def tasks(self, *, limit: int = 50, offset: int = 0, **filters: str) -> dict[str, Any]:
        """A page of tasks, newest first; filters: status, op, device_key."""
        params = {"limit": limit, "offset": offset, **filters}
        return self._request("GET", "/tasks", params=params)

    def trials(self, task_id: int, *, order: str = "id", limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """A page of a task's trials (`order="latency"`: fastest first)."""
        params = {"order": order, "limit": limit, "offset": offset}
        return self._request("GET", f"/tasks/{task_id}/trials", params=params)

    def best(self, task_id: int) -> dict[str, Any]:
        """The task's best trial so far, with latency and GFLOP/s."""
        return self._request("GET", f"/tasks/{task_id}/best")

    def cancel(self, task_id: int) -> dict[str, Any]:
        """Cancel an unfinished task."""
        return self._request("POST", f"/tasks/{task_id}/cancel")

    def wait(
        self,
        task_id: int,
        *,
        progress: bool = True,
        poll_s: float = 1.0,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Poll until the task is done, failed or cancelled and return it; with `progress`,
        show a progress bar of trials against the budget on a terminal, else print a line per
        change of status or best ("task 7 running: trials 12/64, best 85.2 GFLOP/s").
        TimeoutError after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with _ProgressView(enabled=progress) as view:
            while True:
                task = self.get(task_id)
                view.update(task)
                if task["status"] in FINAL_STATUSES:
                    return task
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"task {task_id} still {task['status']} after {timeout_s}s")
                time.sleep(poll_s)

    def download(self, task_id: int, out_dir: str | Path, targets: Sequence[str] | None = None) -> Path:
        """Download the task's artifact into `out_dir` and return the folder holding its
        manifest.json. The archive is checked against the server's sha256 and the shared
        library against the manifest's; IntegrityError on a mismatch. With `targets` (CPU ISAs,
        e.g. ["avx2", "avx512"]): ONE library of the task's workload for all of them that runs
        the best the CPU supports (GET /tasks/{id}/artifact/multi-target, built on request)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path, params, timeout = f"/tasks/{task_id}/artifact", {}, httpx.USE_CLIENT_DEFAULT
        if targets is not None:  # the server compiles each ISA's kernel before it answers
            path, params, timeout = f"{path}/multi-target", {"targets": ",".join(targets)}, MULTI_TARGET_TIMEOUT_S
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            archive = Path(tmp) / "artifact.tar.gz"
            with self._reaching(), self._http.stream("GET", path, params=params, timeout=timeout) as response:
                if response.is_error:
                    response.read()
                    raise ServiceError(response.status_code, response.json().get("detail"))
                expected = response.headers["X-Content-SHA256"]
                with archive.open("wb") as f:
                    for chunk in response.iter_bytes():
                        f.write(chunk)
            actual = _sha256(archive)
            if actual != expected:
                raise IntegrityError(f"artifact of task {task_id} has sha256 {actual}, server says {expected}")
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(out, filter="data")
                manifests = [m.name for m in tar.getmembers() if Path(m.name).name == "manifest.json"]
        root = (out / manifests[0]).parent
        _check_manifest(root)
        return root

    def load(self, task_id: int, cache_dir: str | Path | None = None) -> Kernel:
        """Download the task's artifact (into `cache_dir`, default a folder per task under
        ~/.tunefleet/kernels) and load it as a Python callable over numpy arrays."""
        from tunefleet.base.load import load

        folder = Path(cache_dir) if cache_dir else Path.home() / ".tunefleet" / "kernels" / f"task-{task_id}"
        return load(self.download(task_id, folder))


def _check_manifest(root: Path) -> None:
    """Check the shared library in `root` against the sha256 its manifest publishes."""
    manifest = json.loads((root / "manifest.json").read_text())
    library = root / f"{manifest['name']}.so"
    if _sha256(library) != manifest["so_sha256"]:
        raise IntegrityError(f"{library} does not match the sha256 in its manifest")


class _ProgressView:
    """A task's progress while waiting: a rich progress bar on a terminal; elsewhere (a pipe,
    a log file, CI) a plain line whenever the status or the best changes, and at most every
    LINE_EVERY_S seconds while only the trial count moves. Does nothing when disabled."""

    LINE_EVERY_S = 10.0

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.progress = None
        self.last: tuple | None = None
        self.last_line_at = 0.0

    def __enter__(self) -> _ProgressView:
        from rich.console import Console

        if self.enabled and Console().is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("task {task.fields[number]} {task.fields[status]}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("best {task.fields[best]}"),
                TimeElapsedColumn(),
            )
            self.progress.start()
            self.bar = self.progress.add_task("", total=None, number="?", status="", best="-")
        return self

    def update(self, task: dict[str, Any]) -> None:
        if not self.enabled:
            return
        best = f"{task['best_gflops']:.1f} GFLOP/s" if task["best_gflops"] else "-"
        if self.progress is not None:
            self.progress.update(self.bar, total=task["budget"]["trials"], completed=task["trials_done"],
                                 number=task["id"], status=task["status"], best=best)
            return
        state = (task["status"], best, task["trials_done"])
        now = time.monotonic()
        if self.last is None or state[:2] != self.last[:2] or (
                state != self.last and now - self.last_line_at >= self.LINE_EVERY_S):
            print(f"task {task['id']} {task['status']}: trials {task['trials_done']}/{task['budget']['trials']}, "
                  f"best {best}", flush=True)
            self.last, self.last_line_at = state, now

    def __exit__(self, *_exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
