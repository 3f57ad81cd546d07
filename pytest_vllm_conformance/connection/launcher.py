"""Start and stop a real ``vllm serve`` on 127.0.0.1.

Used by the plugin's embedded mode (``--vllm-serve MODEL_DIR``), and by our
own tests' server pool (``fixtures/server_pool.py``). The server
runs in its own session so the whole process tree (API server, engine core,
workers) is stopped together, first politely, then by force.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import httpx

from pytest_vllm_conformance.connection.secrets import Secret

CLI_SHIM = Path(__file__).with_name("vllm_cli.py")
# CLI_SHIM's exit status when vLLM cannot be imported (vllm_cli.NO_VLLM; the script is run, never imported).
NO_VLLM = 87
# Told how to say what a start is doing, at each poll; built only when a line is due (plugin/progress.py's ticker).
Progress = Callable[[Callable[[], str]], None]
LOG_TAIL_LINES = 40

# Our own settings must not reach vLLM: it warns about every unknown VLLM_* variable.
_OWN_ENV_PREFIXES = ("VLLM_CONFORMANCE_", "VLLM_URL")

# On a CPU build vLLM otherwise sizes the KV cache from the NUMA node's memory
# and can refuse to start on a machine whose node reports less than it wants.
CPU_DEFAULT_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


class LaunchError(Exception):
    """The server did not become healthy."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Ask Linux to SIGTERM the server if pytest dies without cleaning up."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except OSError:
        pass


class VllmServer:
    """One ``vllm serve`` process tree on a free local port."""

    def __init__(
        self,
        model: str | os.PathLike[str],
        args: Sequence[str] = (),
        *,
        python: str | os.PathLike[str] | None = None,
        api_key: Secret | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 300.0,
    ) -> None:
        self.model = str(model)
        self.args = tuple(args)
        self.python = str(python or sys.executable)
        self.api_key = api_key
        self.extra_env = dict(env or {})
        self.startup_timeout = startup_timeout
        # A log folder of our own (no log_path given) is removed by remove_own_log once the run is done with it.
        self._own_log_dir: Path | None = None
        if log_path is None:
            self._own_log_dir = Path(tempfile.mkdtemp(prefix="vllm-conformance-"))
            log_path = self._own_log_dir / "vllm-serve.log"
        self.log_path = log_path
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.ready_seconds: float | None = None
        self._launched_at = 0.0

    def __repr__(self) -> str:
        return f"VllmServer(model={self.model!r}, args={self.args!r}, url={self.url!r})"

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}" if self.port else None

    def command(self) -> list[str]:
        return [
            self.python,
            str(CLI_SHIM),
            "serve",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *self._default_name(),
            *self.args,
        ]

    @property
    def served_model(self) -> str:
        """The model id clients send: the first ``--served-model-name`` given, else the folder's name."""
        # vLLM would name the model after its argument, a local folder path: a
        # capture taken on one machine would then diff against another's as one
        # model removed and another added. The folder's name is the same everywhere.
        return self._given_name() or Path(self.model).name or self.model

    def _given_name(self) -> str | None:
        for index, arg in enumerate(self.args):
            if arg == "--served-model-name" and index + 1 < len(self.args):
                return self.args[index + 1]
            if arg.startswith("--served-model-name="):
                return arg.split("=", 1)[1]
        return None

    def _default_name(self) -> tuple[str, ...]:
        return () if self._given_name() else ("--served-model-name", self.served_model)

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(_OWN_ENV_PREFIXES)}
        env.pop("VLLM_API_KEY", None)
        for key, value in CPU_DEFAULT_ENV.items():
            env.setdefault(key, value)
        env.update(self.extra_env)
        if self.api_key:
            # Through the environment, not argv: argv is visible to every local user.
            env["VLLM_API_KEY"] = self.api_key.reveal()
        return env

    def start(self, progress: Progress | None = None) -> VllmServer:
        return self.launch().wait_ready(progress)

    def launch(self) -> VllmServer:
        """Start the process without waiting for it (``wait_ready`` waits); call from a long-lived thread:
        the kernel's parent-death signal follows the thread that started the child."""
        self.port = free_port()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._launched_at = time.monotonic()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        return self

    def wait_ready(self, progress: Progress | None = None) -> VllmServer:
        """``progress``: given, at each poll, how to say what the start is doing (the log's last line); it reads
        the log only when it says so."""
        started = self._launched_at
        try:
            self._wait_healthy(started, progress)
        except BaseException:
            self.stop()
            raise
        self.ready_seconds = time.monotonic() - started
        return self

    def _wait_healthy(self, started: float, progress: Progress | None) -> None:
        assert self.process is not None, "launched first"
        deadline = started + self.startup_timeout
        with httpx.Client(timeout=2.0, trust_env=False) as http:
            # Checked at least once: a server launched ahead of its first use may be waited for after its deadline.
            while True:
                if self.process.poll() is not None:
                    if self.process.returncode == NO_VLLM:
                        said = self.log_tail().strip().splitlines() or ["vLLM cannot be imported"]
                        raise LaunchError(
                            f"--vllm-serve: {said[-1]}; install the serve extra "
                            "(pip install 'pytest-vllm-conformance[serve]') or give --vllm-serve-python=PYTHON "
                            "of an environment that has vLLM"
                        )
                    raise LaunchError(
                        f"vllm serve {self.model} exited with code {self.process.returncode} before it was healthy; "
                        f"log {self.log_path}:\n{self.log_tail()}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self.url}/health").status_code == 200:
                        return
                if time.monotonic() >= deadline:
                    break
                if progress is not None:
                    progress(
                        lambda: f"starting vllm serve {self.model}, not healthy yet; its log: {self.last_log_line()}"
                    )
                time.sleep(0.5)
        raise LaunchError(
            f"vllm serve {self.model} was not healthy after {self.startup_timeout:g} s; "
            f"log {self.log_path}:\n{self.log_tail()}"
        )

    def last_log_line(self, width: int = 160) -> str:
        """What the start is doing, as its log's last line says (cut to ``width``; the key masked)."""
        lines = self.log_tail(lines=1).strip().splitlines()
        line = lines[-1].strip() if lines else "(empty)"
        return line if len(line) <= width else line[: width - 3] + "..."

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        tail = "\n".join(text.splitlines()[-lines:])
        if self.api_key:
            tail = tail.replace(self.api_key.reveal(), "***")
        return tail

    def terminate_main(self) -> None:
        """SIGTERM to the API server's process alone, as a container runtime stops a container (the drain check)."""
        assert self.process is not None, "started first"
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(signal.SIGTERM)

    def exit_code(self) -> int | None:
        """The API server's exit status, None while it runs."""
        return self.process.poll() if self.process is not None else None

    def tree_alive(self) -> bool:
        """Whether any process of the server's group (the API server, the engine core, workers) still runs."""
        if self.process is None:
            return False
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def stop(self, grace: float = 20.0) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is not None:
            # Stopped already (a drain check's SIGTERM): only what of its group may outlive it is taken down.
            self._sweep(process)
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._sweep(process)

    @staticmethod
    def _sweep(process: subprocess.Popen[bytes]) -> None:
        """Engine workers may outlive the API server for a moment; take the group
        down and wait until it is gone, so no orphan holds memory or a port."""
        deadline = time.monotonic() + 10.0
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.05)

    def remove_own_log(self) -> None:
        """The temporary log folder this server made (none was asked for): gone once a run ended normally. A start
        that failed keeps it: its error names the log."""
        if self._own_log_dir is not None:
            shutil.rmtree(self._own_log_dir, ignore_errors=True)
            self._own_log_dir = None

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
