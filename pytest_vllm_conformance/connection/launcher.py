"""Start and stop a real ``vllm serve`` on 127.0.0.1, timing its start.

Used by the plugin's embedded mode (``--vllm-serve MODEL_DIR``), and by our
own tests' server pool (``fixtures/server_pool.py``). The server
runs in its own session so the whole process tree (API server, engine core,
workers) is stopped together, first politely, then by force. The start's
clocks (``StartClocks``: /health first 200, the model first listed, a first
token) are read here, as it happens, and nowhere else.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from pytest_vllm_conformance.connection.discovery import model_cards
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


# The clocks of a start, in the order a start reaches them, as reports name them.
CLOCKS = {
    "process_ready": "process ready (/health 200)",
    "endpoint_ready": "endpoint ready (/v1/models lists the model)",
    "first_token": "first token",
}
# A server healthy this long without listing its model, or answering its first token, is taken as never ready.
READINESS_FLOOR_SECONDS = 60.0
FIRST_TOKEN_PROMPT = "Hello"


@dataclass
class StartClocks:
    """When a server the plugin started reached each sign of readiness, in monotonic seconds from its spawn.

    Read once, by ``wait_ready(readiness=True)``, as the start happens; never measured again. A clock left None
    is in ``faults`` when the server answered as a ready server must not (healthy, yet its model never listed;
    its first completion failed or went unanswered), else in ``unread`` with why it was not read (a refusal:
    a key the server does not take, a model that does not generate).
    """

    process_ready: float | None = None  # /health first answered 200
    endpoint_ready: float | None = None  # /v1/models first listed the served model
    first_token: float | None = None  # a first greedy one-token completion answered (its one token)
    faults: dict[str, str] = field(default_factory=dict)
    unread: dict[str, str] = field(default_factory=dict)

    def read(self) -> dict[str, float]:
        """The clocks that were read, by name, in the order a start reaches them."""
        return {name: value for name in CLOCKS if (value := getattr(self, name)) is not None}

    def line(self) -> str:
        """The report's figures: each clock in seconds from the spawn, or why it has none."""
        parts = []
        for name, words in CLOCKS.items():
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{words} {value:.2f} s")
            else:
                parts.append(f"{words}: {self.faults.get(name) or self.unread.get(name) or 'not read'}")
        return "from the spawn: " + "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StartClocks:
        return cls(**data)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listed(answer: httpx.Response) -> list[str]:
    """The model ids a /v1/models answer lists (none when it is not a model list)."""
    try:
        payload = answer.json()
    except ValueError:
        return []
    return [card.id for card in model_cards(payload)]


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
        # Set once /health answers 200: its process readiness, and with readiness=True the clocks after it.
        self.clocks: StartClocks | None = None
        self._launched_at = 0.0

    def __repr__(self) -> str:
        return f"VllmServer(model={self.model!r}, args={self.args!r}, url={self.url!r})"

    @property
    def url(self) -> str | None:
        return f"http://127.0.0.1:{self.port}" if self.port else None

    @property
    def ready_seconds(self) -> float | None:
        """Seconds from the spawn until /health first answered 200; None until then."""
        return self.clocks.process_ready if self.clocks is not None else None

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

    def start(self, progress: Progress | None = None, *, readiness: bool = False) -> VllmServer:
        return self.launch().wait_ready(progress, readiness=readiness)

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

    def wait_ready(self, progress: Progress | None = None, *, readiness: bool = False) -> VllmServer:
        """``progress``: given, at each poll, how to say what the start is doing (the log's last line); it reads
        the log only when it says so. ``readiness``: once healthy, also time the endpoint's readiness and a first
        token (``clocks``); what the server answers then never fails the start (discovery judges it next)."""
        started = self._launched_at
        try:
            self._wait_healthy(started, progress)
            self.clocks = StartClocks(process_ready=time.monotonic() - started)
            if readiness:
                self._time_readiness(started, self.clocks)
        except BaseException:
            self.stop()
            raise
        return self

    def _time_readiness(self, started: float, clocks: StartClocks) -> None:
        """The clocks after /health: the model listed by /v1/models, then a greedy one-token completion answered.

        Polled until the start's deadline, and at least ``READINESS_FLOOR_SECONDS`` past the health; a refusal
        (4xx) ends the reading at once: the clock is unread, not the server's fault.
        """
        deadline = max(started + self.startup_timeout, time.monotonic() + READINESS_FLOOR_SECONDS)
        headers = {"Authorization": f"Bearer {self.api_key.reveal()}"} if self.api_key else {}
        with httpx.Client(timeout=5.0, trust_env=False, headers=headers) as http:
            if not self._time_listing(http, started, deadline, clocks):
                return
            body = {"model": self.served_model, "prompt": FIRST_TOKEN_PROMPT, "max_tokens": 1, "temperature": 0}
            asked = "a greedy one-token POST /v1/completions"
            try:
                answer = http.post(
                    f"{self.url}/v1/completions", json=body, timeout=max(deadline - time.monotonic(), 5.0)
                )
            except httpx.HTTPError as exc:
                clocks.faults["first_token"] = f"{asked} got no answer: {type(exc).__name__} {exc}".strip()
                return
            if answer.status_code == 200:
                clocks.first_token = time.monotonic() - started
            elif answer.status_code >= 500:
                clocks.faults["first_token"] = f"{asked} answered {answer.status_code}: {answer.text[:200]!r}"
            else:
                clocks.unread["first_token"] = f"{asked} was refused ({answer.status_code}): {answer.text[:200]!r}"

    def _time_listing(self, http: httpx.Client, started: float, deadline: float, clocks: StartClocks) -> bool:
        """Polls /v1/models until it lists the served model; whether it did."""
        seen = "no answer"
        while True:
            if self.process is not None and self.process.poll() is not None:
                clocks.faults["endpoint_ready"] = (
                    f"the server exited ({self.process.returncode}) before it listed its model"
                )
                return False
            try:
                answer = http.get(f"{self.url}/v1/models")
            except httpx.HTTPError as exc:
                seen = f"no answer ({type(exc).__name__})"
            else:
                listed = _listed(answer)
                if answer.status_code == 200 and self.served_model in listed:
                    clocks.endpoint_ready = time.monotonic() - started
                    return True
                if 400 <= answer.status_code < 500:
                    clocks.unread["endpoint_ready"] = f"GET /v1/models was refused ({answer.status_code})"
                    return False
                seen = (
                    f"{answer.status_code}, listing {listed}" if answer.status_code == 200 else f"{answer.status_code}"
                )
            if time.monotonic() >= deadline:
                clocks.faults["endpoint_ready"] = (
                    f"/health answered 200, yet GET /v1/models did not list {self.served_model!r} "
                    f"{time.monotonic() - started:.0f} s after the spawn (last: {seen})"
                )
                return False
            time.sleep(0.1)

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
