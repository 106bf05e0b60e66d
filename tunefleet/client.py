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
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

#: Seconds a download waits, by default, for a worker to build the archive (a model's bundle,
#: a multi-target library: the server answers 202 until it is stored).
BUILD_TIMEOUT_S = 600.0
#: Seconds a model upload may take: the server parses and extracts the model before it answers.
MODEL_SUBMIT_TIMEOUT_S = 600.0

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

    def download(self, task_id: int, out_dir: str | Path, targets: Sequence[str] | None = None, *,
                 progress: bool = False, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
        """Download the task's artifact into `out_dir` and return the folder holding its
        manifest.json. The archive is checked against the server's sha256 and the shared
        library against the manifest's; IntegrityError on a mismatch. With `targets` (CPU ISAs,
        e.g. ["avx2", "avx512"]): ONE library of the task's workload for all of them that runs
        the best the CPU supports (GET /tasks/{id}/artifact/multi-target), built by a worker at
        the first request: this waits for it (see `_fetch`: `progress`, `timeout_s`)."""
        path, params = f"/tasks/{task_id}/artifact", {}
        if targets is not None:
            path, params = f"{path}/multi-target", {"targets": ",".join(targets)}
        root = self._fetch(path, out_dir, "manifest.json", f"artifact of task {task_id}", params, progress, timeout_s)
        _check_manifest(root)
        return root

    def _fetch(self, path: str, out_dir: str | Path, manifest: str, what: str, params: dict[str, str],
               progress: bool = False, timeout_s: float = BUILD_TIMEOUT_S) -> Path:
        """GET the tar.gz at `path`, check it against the server's X-Content-SHA256 (IntegrityError
        naming `what`), extract it into `out_dir` and return the folder holding its file `manifest`.
        While the server answers 202 (a worker builds it) ask again after its Retry-After, with
        `progress` printing each new state on stderr; TimeoutError after `timeout_s` seconds."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        deadline, last = time.monotonic() + timeout_s, None
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            archive = Path(tmp) / "artifact.tar.gz"
            while True:
                with self._reaching(), self._http.stream("GET", path, params=params) as response:
                    if response.is_error:
                        response.read()
                        raise ServiceError(response.status_code, response.json().get("detail"))
                    if response.status_code != 202:
                        expected = response.headers["X-Content-SHA256"]
                        with archive.open("wb") as f:
                            for chunk in response.iter_bytes():
                                f.write(chunk)
                        break
                    response.read()
                    building = response.json()
                    wait_s = float(response.headers.get("Retry-After", building["retry_after_s"]))
                if progress and building["state"] != last:
                    print(f"{what}: being built by a worker ({building['state']})", file=sys.stderr, flush=True)
                    last = building["state"]
                if time.monotonic() + wait_s > deadline:
                    raise TimeoutError(f"{what} still being built ({building['state']}) after {timeout_s:g} s")
                time.sleep(wait_s)
            actual = _sha256(archive)
            if actual != expected:
                raise IntegrityError(f"{what} has sha256 {actual}, server says {expected}")
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(out, filter="data")
                manifests = [m.name for m in tar.getmembers() if Path(m.name).name == manifest]
        return (out / manifests[0]).parent

    def load(self, task_id: int, cache_dir: str | Path | None = None) -> Kernel:
        """Download the task's artifact (into `cache_dir`, default a folder per task under
        ~/.tunefleet/kernels) and load it as a Python callable over numpy arrays."""
        from tunefleet.base.load import load

        folder = Path(cache_dir) if cache_dir else Path.home() / ".tunefleet" / "kernels" / f"task-{task_id}"
        return load(self.download(task_id, folder))


    # --- whole models ------------------------------------------------------------------------

    def submit_model(self, model: str | Path | bytes, *, name: str | None = None, trials: int = 64,
                     target: str | None = None, device_key: str | None = None,
                     input_shapes: dict[str, Sequence[int]] | None = None,
                     protocol: dict[str, Any] | None = None, prepack: bool = True) -> dict[str, Any]:
        """Submit an ONNX model (a file path or its bytes) for whole-model tuning with `trials`
        in all, spread over its layers by the server's task scheduler; `input_shapes` fixes
        graph inputs with dynamic dimensions (name → dims); `protocol` how workers time its
        candidates (the task protocol's fields; default: the workers' defaults); `prepack`:
        convolutions and linear layers take their constant weights pre-packed. Returns the model: its tasks
        (layers), untuned nodes and status. ServiceError (422) lists the nodes it cannot handle."""
        data = model if isinstance(model, bytes) else Path(model).read_bytes()
        label = name or (Path(model).name if not isinstance(model, bytes) else "model.onnx")
        params: dict[str, Any] = {"name": label, "trials": trials, "target": target, "device_key": device_key,
                                  "prepack": str(prepack).lower()}
        if protocol is not None:
            params["protocol"] = json.dumps(protocol)
        if input_shapes:
            params["input_shapes"] = ";".join(f"{k}={','.join(map(str, v))}" for k, v in input_shapes.items())
        return self._request("POST", "/models", content=data, headers={"Content-Type": "application/octet-stream"},
                             params={k: v for k, v in params.items() if v is not None}, timeout=MODEL_SUBMIT_TIMEOUT_S)

    def get_model(self, model_id: int) -> dict[str, Any]:
        """The model with its layers' progress, its estimated latency and history."""
        return self._request("GET", f"/models/{model_id}")

    def cancel_model(self, model_id: int) -> dict[str, Any]:
        """Cancel an unfinished model and its unfinished tasks."""
        return self._request("POST", f"/models/{model_id}/cancel")

    def wait_model(self, model_id: int, *, progress: bool = True, poll_s: float = 1.0,
                   timeout_s: float | None = None) -> dict[str, Any]:
        """Poll until the model is done, failed or cancelled and return it; with `progress`,
        print a line whenever its trials or estimate change ("model 3 running: trials 12/64,
        2/3 layers tuned, estimate 1.52 ms"). TimeoutError after `timeout_s`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        last = None
        while True:
            model = self.get_model(model_id)
            line = model_line(model)
            if progress and line != last:
                print(line, flush=True)
                last = line
            if model["status"] in FINAL_STATUSES:
                return model
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"model {model_id} still {model['status']} after {timeout_s}s")
            time.sleep(poll_s)

    def download_bundle(self, model_id: int, out_dir: str | Path, *, progress: bool = False,
                        timeout_s: float = BUILD_TIMEOUT_S) -> Path:
        """Download the done model's bundle (one .so of every kernel, its header and
        model_manifest.json; built by a worker at the first request: this waits for it, see
        `_fetch`: `progress`, `timeout_s`) into `out_dir` and return its folder, for
        `tunefleet.load`. The archive is checked against the server's sha256 and the library
        against the manifest's; IntegrityError on a mismatch."""
        root = self._fetch(f"/models/{model_id}/bundle", out_dir, "model_manifest.json",
                           f"bundle of model {model_id}", {}, progress, timeout_s)
        _check_manifest(root, "model_manifest.json", "library")
        return root


def best_text(task: dict[str, Any]) -> str:
    """A task's best as "G GFLOP/s, L ms, disturbance D" (L in us below a millisecond; the
    disturbance of its measurement, a fraction, when the server reports one); "-" while it has
    none."""
    if task["best_latency_s"] is None:
        return "-"
    latency = task["best_latency_s"]
    shown = f"{latency * 1e6:.4g} us" if latency < 1e-3 else f"{latency * 1e3:.4g} ms"
    text = f"{task['best_gflops']:.2f} GFLOP/s, {shown}"
    disturbance = task.get("best_disturbance")
    return text if disturbance is None else f"{text}, disturbance {disturbance:.2f}"


def model_line(model: dict[str, Any]) -> str:
    """One line of a model's progress: status, trials, layers with a kernel, the estimate."""
    tuned = sum(1 for t in model["tasks"] if t["best_latency_s"] is not None)
    estimate = model["estimated_latency_s"]
    shown = f"{estimate * 1e3:.4g} ms" if estimate is not None else "-"
    return (f"model {model['id']} {model['status']}: trials {model['trials_done']}/{model['trials']}, "
            f"{tuned}/{len(model['tasks'])} layers tuned, estimate {shown}")


def _check_manifest(root: Path, name: str = "manifest.json", library_key: str | None = None) -> None:
    """Check the shared library in `root` against the sha256 its manifest `name` publishes (the
    library: the manifest's `library_key` entry, else `<name>.so`)."""
    manifest = json.loads((root / name).read_text())
    library = root / (manifest[library_key] if library_key else f"{manifest['name']}.so")
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
