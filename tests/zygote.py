"""``python -c CODE ARGS...`` forked from a process that has already imported the product
and its libraries, for the suite's many commands stopped at a kill point.

A fresh interpreter spends about 3 CPU-seconds importing torch, scikit-learn (through
LightGBM), pyarrow, delta-rs and pyiceberg before a small run that takes a tenth of
that; the kill-point sweeps start one per point.  :func:`popen` returns what
``subprocess.Popen([sys.executable, "-c", code, *args], stdout=PIPE, stderr=PIPE,
text=True)`` returns for what the tests use of it (``stdout``, ``send_signal``,
``kill``, ``communicate``, ``wait``, ``returncode``, ``pid``), but the process is a fork
of a *zygote*: one per test process, started on first use, that imported the modules of
:data:`PRELOAD` and then only waits.  It forks each request, hands the child the
caller's pipes (``SCM_RIGHTS``), and reports the child's exit status back on the
request's connection; the child sets the caller's environment, folder and ``sys.argv``
and runs the code as ``__main__``, with ``atexit`` handlers and stdio flushed as
Python's own exit does.

Run as ``python -m tests.zygote SOCKET`` (by :func:`popen`, not by hand).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import traceback
import types
from pathlib import Path
from typing import IO, Any

#: Imported once by the zygote: what the stopped commands import.  A module missing from
#: this installation (an extra not installed) is left out.
PRELOAD = (
    "numpy", "pandas", "pyarrow.parquet", "pyarrow.dataset", "torch", "sklearn.ensemble",
    "lightgbm", "xgboost", "deltalake", "pyiceberg.catalog.sql", "pyiceberg.table",
    "scoring.cli", "scoring._engines", "scoring._engines.local", "scoring._engines.plan",
    "scoring._frameworks.lightgbm", "scoring._frameworks.xgboost", "scoring._changes",
)  # fmt: skip
_ROOT = Path(__file__).resolve().parents[1]


# -- the zygote ---------------------------------------------------------------------


def serve(path: str) -> None:
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd fires
    print("ready", flush=True)
    waiting: dict[int, socket.socket] = {}
    events = selectors.DefaultSelector()
    events.register(server, selectors.EVENT_READ)
    events.register(wake_r, selectors.EVENT_READ)
    events.register(sys.stdin, selectors.EVENT_READ)  # its end: the caller's end
    while True:
        for key, _ in events.select():
            if key.fileobj is server:
                _fork_one(server, wake_r, wake_w, waiting)
            elif key.fileobj is sys.stdin:
                return
            else:
                os.read(wake_r, 4096)
        _reap(waiting)


def _fork_one(server: socket.socket, wake_r: int, wake_w: int,
              waiting: dict[int, socket.socket]) -> None:  # fmt: skip
    conn, _ = server.accept()
    message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
    request = json.loads(message)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        server.close()
        conn.close()
        os.close(wake_r)
        os.close(wake_w)
        _child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.sendall(f"{pid}\n".encode())
    waiting[pid] = conn


def _reap(waiting: dict[int, socket.socket]) -> None:
    while waiting:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = waiting.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
            conn.close()


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: become ``python -c CODE ARGS`` and never return."""
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a fresh interpreter has
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # as Python sets it at start
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["-c", *request["args"]]
    sys.path[0] = ""  # python -c puts the current folder first
    code = 0
    try:
        main = types.ModuleType("__main__")  # as python -c's: no spec, no file
        sys.modules["__main__"] = main
        exec(compile(request["code"], "<string>", "exec"), main.__dict__)
    except SystemExit as stop:
        code = _exit_code(stop)
    except BaseException:  # what the interpreter prints for an uncaught exception
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _exit_code(stop: SystemExit) -> int:
    if stop.code is None:
        return 0
    if isinstance(stop.code, int):
        return stop.code & 0xFF
    print(stop.code, file=sys.stderr)
    return 1


# -- the caller's side --------------------------------------------------------------


class Forked:
    """The child of one request, as much of ``subprocess.Popen`` as the tests use."""

    def __init__(self, path: str, code: str, args: list[str], *, cwd: str | None = None,
                 env: dict[str, str] | None = None, stdio: tuple[int, int, int] | None = None,
                 ) -> None:  # fmt: skip
        """``stdio``: the child's standard streams; by default no input, and its output
        and errors piped to :attr:`stdout` and :attr:`stderr`."""
        self._conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._conn.connect(path)
        self._said = b""
        request = {"code": code, "args": args, "cwd": cwd or os.getcwd(),
                   "env": dict(os.environ if env is None else env)}  # fmt: skip
        message = [json.dumps(request).encode()]
        if stdio is not None:
            socket.send_fds(self._conn, message, list(stdio))
        else:
            out_r, out_w = os.pipe()
            err_r, err_w = os.pipe()
            stdin = os.open(os.devnull, os.O_RDONLY)
            try:
                socket.send_fds(self._conn, message, [stdin, out_w, err_w])
            finally:
                for fd in (stdin, out_w, err_w):
                    os.close(fd)
            self.stdout: IO[str] = open(out_r)  # noqa: SIM115 (closed by communicate)
            self.stderr: IO[str] = open(err_r)  # noqa: SIM115
        line = self._line(block=True)
        assert line is not None, "the zygote closed the request"
        self.pid = int(line)
        self.returncode: int | None = None

    def _line(self, *, block: bool, timeout: float | None = None) -> str | None:
        """The zygote's next line (the child's pid, then its exit status), or None when
        not blocking and it has not come."""
        while b"\n" not in self._said:
            self._conn.settimeout(timeout if block else 0.0)
            try:
                chunk = self._conn.recv(64)
            except BlockingIOError:
                return None
            except TimeoutError as exc:
                raise subprocess.TimeoutExpired(["zygote", str(self)], timeout or 0) from exc
            if not chunk:
                raise RuntimeError("the zygote closed the request without an exit status")
            self._said += chunk
        line, _, self._said = self._said.partition(b"\n")
        return line.decode()

    def poll(self) -> int | None:
        if self.returncode is None:
            line = self._line(block=False)
            if line is not None:
                self._ended(int(line))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self._ended(int(self._line(block=True, timeout=timeout) or ""))
        assert self.returncode is not None
        return self.returncode

    def _ended(self, code: int) -> None:
        self.returncode = code
        self._conn.close()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        """Both pipes read to their end (the error pipe in a thread, so that neither
        fills while the other is read), then the exit status."""
        err: list[str] = []
        reader = threading.Thread(target=lambda: err.append(self.stderr.read()), daemon=True)
        reader.start()
        out = self.stdout.read()
        reader.join()
        self.stdout.close()
        self.stderr.close()
        self.wait(timeout)
        return out, err[0]


_ZYGOTE: dict[int, tuple[subprocess.Popen[str], str]] = {}


def _zygote() -> str:
    """The socket of this process's zygote, started on first use (a process of a
    different pid, as xdist's workers are, starts its own)."""
    mine = _ZYGOTE.get(os.getpid())
    if mine is not None and mine[0].poll() is None:
        return mine[1]
    path = os.path.join(tempfile.mkdtemp(prefix="scoring-zygote-"), "socket")
    pipes: dict[str, Any] = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE}
    process = subprocess.Popen([sys.executable, "-m", "tests.zygote", path], cwd=_ROOT,
                               text=True, **pipes)  # fmt: skip
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    atexit.register(_end, process)
    _ZYGOTE[os.getpid()] = (process, path)
    return path


#: The CLI, as a forked child runs it.
_CLI = "import sys\nsys.argv[0] = 'scoring'\nfrom scoring.cli import app\napp()"

#: The ``scoring`` command without site-packages (this module imports the standard
#: library alone): a child of the zygote runs the CLI on the command's own standard
#: streams, and the command exits as the child did (a signal it gets is passed on).
_SHIM = """#!{python} -S
import sys
sys.path.insert(0, {root!r})
from tests.zygote import shim
shim({path!r})
"""


def shim(path: str) -> None:
    """The body of the ``scoring`` of :func:`cli_folder`."""
    child = Forked(path, _CLI, sys.argv[1:], stdio=(0, 1, 2))
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda sig, _: child.send_signal(sig))
    code = child.wait()
    sys.exit(code if code >= 0 else 128 - code)


def cli_folder() -> Path:
    """A folder whose ``scoring`` is the command forked from this process's zygote: put
    it first on ``PATH`` where a shell runs ``scoring``."""
    path = _zygote()
    folder = Path(path).parent / "bin"
    command = folder / "scoring"
    if not command.exists():
        folder.mkdir(exist_ok=True)
        command.write_text(_SHIM.format(python=sys.executable, root=str(_ROOT), path=path))
        command.chmod(0o755)
    return folder


def _end(process: subprocess.Popen[str]) -> None:
    """The zygote told to end (its input closed), as its own exit saves what it must
    (a coverage run's data); killed if it does not."""
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def popen(code: str, *args: str, cwd: str | os.PathLike[str] | None = None,
          env: dict[str, str] | None = None) -> Forked:  # fmt: skip
    """``python -c code *args`` with its output and errors piped, forked from the zygote."""
    return Forked(_zygote(), code, list(args), cwd=None if cwd is None else str(cwd), env=env)


if __name__ == "__main__":
    serve(sys.argv[1])
