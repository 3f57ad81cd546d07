"""Every option of the plugin, as data: its name, help, kind, default and environment variable.

plugin/options.py registers them with pytest and resolves each value from
the command line, the environment, the ini file or the default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pytest_vllm_conformance.connection.secrets import MIN_SECRET_CHARS
from pytest_vllm_conformance.connection.settings import MIB

Kind = Literal["str", "int", "float", "path", "list", "flag", "version", "choice", "url", "urls"]


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    kind: Kind = "str"
    default: Any = None
    env: str | None = None
    secret: bool = False
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    # A number's largest value: past it a run cannot end in bounded time or memory (a timeout of 1e300 s).
    maximum: float | None = None
    # A secret's fewest characters: a shorter one cannot be masked without masking ordinary words.
    min_chars: int = 0

    @property
    def described(self) -> str:
        """The help text with the range a number must lie in."""
        if self.kind not in ("int", "float"):
            return self.help
        bounds = "finite, above 0" if self.kind == "float" else "at least 1"
        if self.maximum is not None:
            bounds += f", at most {int(self.maximum) if float(self.maximum).is_integer() else self.maximum}"
        return f"{self.help} ({bounds})"

    @property
    def flag(self) -> str:
        return f"--{self.name}"

    @property
    def dest(self) -> str:
        return self.name.replace("-", "_")

    @property
    def has_ini(self) -> bool:
        """Settings have an ini key; an action flag (``--vllm-list-contracts``) does not."""
        return self.kind != "flag" or self.env is not None

    @property
    def key(self) -> str:
        """Attribute name on Settings: ``vllm-max-body`` -> ``max_body``."""
        return self.dest.removeprefix("vllm_")


OPTIONS: tuple[Option, ...] = (
    Option(
        "vllm-url",
        "Base URL of the vLLM server under test (a path is a prefix, as behind --root-path). Given more than once "
        "(the env variable and ini take a comma or space separated list), each URL is a replica of a fleet, "
        "named host:port (docs/fleet.md).",
        kind="urls",
        default=(),
        env="VLLM_URL",
        metavar="URL",
    ),
    Option(
        "vllm-fleet",
        "A fleet file (YAML: replicas, each with a url and an optional name and labels; docs/fleet.md): every "
        "replica is a target, checked contract by contract. Adds to any --vllm-url.",
        kind="path",
        env="VLLM_CONFORMANCE_FLEET",
        metavar="FILE",
    ),
    Option(
        "vllm-fleet-expand-dns",
        "A replica's host name that resolves to several addresses (a headless Service, say) becomes one replica "
        "per address, named NAME-ADDRESS; the header says which names were expanded.",
        kind="flag",
        default=False,
        env="VLLM_CONFORMANCE_FLEET_EXPAND_DNS",
    ),
    Option(
        "vllm-api-key",
        "API key sent as 'Authorization: Bearer'. Never printed; prefer the env variable (other local users "
        "can read a command line).",
        env="VLLM_API_KEY",
        secret=True,
        metavar="KEY",
        min_chars=MIN_SECRET_CHARS,
    ),
    Option(
        "vllm-model",
        "Model id to test (default: the first model the server lists).",
        env="VLLM_CONFORMANCE_MODEL",
        metavar="ID",
    ),
    Option(
        "vllm-profile",
        "Serving profile (YAML) declaring what the server must do.",
        kind="path",
        env="VLLM_CONFORMANCE_PROFILE",
        metavar="PATH",
    ),
    Option(
        "vllm-timeout",
        "Seconds allowed for one request, body included.",
        kind="float",
        default=30.0,
        env="VLLM_CONFORMANCE_TIMEOUT",
        metavar="S",
        maximum=3600,
    ),
    Option(
        "vllm-max-body",
        "Largest response body read, in bytes; the rest is dropped and recorded as truncated.",
        kind="int",
        default=MIB,
        env="VLLM_CONFORMANCE_MAX_BODY",
        metavar="BYTES",
        maximum=1024 * MIB,
    ),
    Option(
        "vllm-serve",
        "Start 'vllm serve MODEL_DIR' on 127.0.0.1 when no --vllm-url is given. The model is served under the "
        "folder's name (--served-model-name, unless a --vllm-serve-arg sets one), so captures from different "
        "machines compare.",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE",
        metavar="MODEL_DIR",
    ),
    Option(
        "vllm-serve-arg",
        "Extra argument for the embedded 'vllm serve' (repeatable; env and ini: shell words).",
        kind="list",
        default=(),
        env="VLLM_CONFORMANCE_SERVE_ARGS",
        metavar="ARG",
    ),
    Option(
        "vllm-serve-python",
        "Python interpreter that has vLLM installed (default: the one running pytest).",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE_PYTHON",
        metavar="PYTHON",
    ),
    Option(
        "vllm-serve-timeout",
        "Seconds to wait for the embedded server's /health.",
        kind="float",
        default=300.0,
        env="VLLM_CONFORMANCE_SERVE_TIMEOUT",
        metavar="S",
        maximum=86400,
    ),
    Option(
        "vllm-serve-log",
        "File for the embedded server's log, named in the report header (default: in pytest's temporary directory).",
        kind="path",
        env="VLLM_CONFORMANCE_SERVE_LOG",
        metavar="PATH",
    ),
    Option(
        "vllm-serve-second-start",
        "Start the embedded server twice with the same flags: the first start is timed and stopped, the run tests "
        "the second (its compile and file caches warm), and the lifecycle suite reports both starts' clocks apart.",
        kind="flag",
        default=False,
        env="VLLM_CONFORMANCE_SERVE_SECOND_START",
    ),
    Option(
        "vllm-ingress-url",
        "Public entry (gateway, proxy) in front of --vllm-url; the watermark, auth and wire suites send callers' "
        "requests here. Given without --vllm-url, it is the server under test.",
        kind="url",
        env="VLLM_CONFORMANCE_INGRESS_URL",
        metavar="URL",
    ),
    Option(
        "vllm-ingress-api-key",
        "API key callers send to --vllm-ingress-url, when the gateway holds its own (default: --vllm-api-key). "
        "Never printed; prefer the env variable.",
        env="VLLM_CONFORMANCE_INGRESS_API_KEY",
        secret=True,
        metavar="KEY",
        min_chars=MIN_SECRET_CHARS,
    ),
    Option(
        "vllm-watermark-key",
        "The server's watermark key (decimal or 0x-hex), for the watermark detector (default: the variable "
        "named by the profile's watermark.key_env). At least 10000000 (8 digits; a smaller key is refused). Never "
        "printed, and scrubbed from every report; prefer the env variable.",
        env="VLLM_CONFORMANCE_WATERMARK_KEY",
        secret=True,
        metavar="KEY",
    ),
    Option(
        "vllm-capture-profile",
        "Write the target's observed serving profile (version, models, max_model_len, routes, auth, scale-out, "
        "error bounds, metric names, tokenizer fingerprint) to PATH, in the --vllm-profile schema.",
        kind="path",
        env="VLLM_CONFORMANCE_CAPTURE_PROFILE",
        metavar="PATH",
    ),
    Option(
        "vllm-baseline",
        "A profile captured with --vllm-capture-profile; the profile_diff suite compares the target with it, "
        "and the context suite expects its max_model_len.",
        kind="path",
        env="VLLM_CONFORMANCE_BASELINE",
        metavar="PATH",
    ),
    Option(
        "vllm-diff-report",
        "Where to write the Markdown diff against --vllm-baseline (default: BASELINE.diff.md beside it).",
        kind="path",
        env="VLLM_CONFORMANCE_DIFF_REPORT",
        metavar="PATH",
    ),
    Option(
        "vllm-report",
        "Write the conformance report to PATH (YAML: target, expectations, a verdict per feature, every "
        "failed or skipped contract) and its Markdown twin beside it (same stem, .md).",
        kind="path",
        env="VLLM_CONFORMANCE_REPORT",
        metavar="PATH",
    ),
    Option(
        "vllm-shard",
        "This run is shard I of N of one run (split by -k or -m, or one per replica): its report says so, and "
        "`vllm-conformance merge` refuses a set with a shard missing or given twice (docs/fleet-sharding.md).",
        env="VLLM_CONFORMANCE_SHARD",
        metavar="I/N",
    ),
    Option(
        "vllm-shard-replicas",
        "This run is the shard of its --vllm-url in a fleet of these replicas (every one's URL; repeatable, or "
        "comma separated): the merge wants one shard per URL and compares their observed serving profiles.",
        kind="urls",
        default=(),
        env="VLLM_CONFORMANCE_SHARD_REPLICAS",
        metavar="URL",
    ),
    Option(
        "vllm-shard-run",
        "The run this shard belongs to (any word every shard of the run is given alike; default: the CI's run id, "
        "from GITHUB_RUN_ID and GITHUB_RUN_ATTEMPT, CI_PIPELINE_ID, BUILDKITE_BUILD_ID, CIRCLE_WORKFLOW_ID or "
        "BUILD_TAG): the merge refuses shards of different runs.",
        env="VLLM_CONFORMANCE_SHARD_RUN",
        metavar="ID",
    ),
    Option(
        "vllm-log",
        "A vLLM server's log for the startup_log suite (default: the embedded server's log).",
        kind="path",
        env="VLLM_CONFORMANCE_LOG",
        metavar="FILE",
    ),
    Option(
        "vllm-baseline-log",
        "The log of an earlier start (the old release, or a warm start) to compare the start-up phases of "
        "--vllm-log (or the embedded server's) with.",
        kind="path",
        env="VLLM_CONFORMANCE_BASELINE_LOG",
        metavar="FILE",
    ),
    Option(
        "vllm-manifests",
        "Deployment files (a directory or one file: YAML, Helm values, .env, Dockerfile, shell) "
        "for the preflight suite, which needs no server.",
        kind="path",
        env="VLLM_CONFORMANCE_MANIFESTS",
        metavar="DIR",
    ),
    Option(
        "vllm-checkpoint",
        "A model directory (config.json, safetensors) for the checkpoint suite, which needs no server: will its "
        "quantization start on the target version, and be read as written (default: the --vllm-serve directory).",
        kind="path",
        env="VLLM_CONFORMANCE_CHECKPOINT",
        metavar="DIR",
    ),
    Option(
        "vllm-target-version",
        "The vLLM version the deployment files and the checkpoint will run (preflight, checkpoint; default: the "
        "server's version).",
        kind="version",
        env="VLLM_CONFORMANCE_TARGET_VERSION",
        metavar="X",
    ),
    Option(
        "vllm-baseline-url",
        "A second server (the old version or config) the quality suite asks the same requests and compares "
        "the target with, in the same run.",
        kind="url",
        env="VLLM_CONFORMANCE_BASELINE_URL",
        metavar="URL",
    ),
    Option(
        "vllm-baseline-model",
        "Model id on --vllm-baseline-url (default: the target's id when served there, else the first listed); "
        "with --vllm-eval-baseline-file, the recorded model a target serving another model is judged against.",
        env="VLLM_CONFORMANCE_BASELINE_MODEL",
        metavar="ID",
    ),
    Option(
        "vllm-baseline-is-target",
        "--vllm-baseline-url is the target itself, and that is meant (a noise check of the serving gate): without "
        "it, a serving baseline that is the target (the same URL, or the same server under another name) is refused.",
        kind="flag",
        default=False,
        env="VLLM_CONFORMANCE_BASELINE_IS_TARGET",
    ),
    Option(
        "vllm-baseline-api-key",
        "API key for --vllm-baseline-url (default: --vllm-api-key). Never printed; prefer the env variable.",
        env="VLLM_CONFORMANCE_BASELINE_API_KEY",
        secret=True,
        metavar="KEY",
        min_chars=MIN_SECRET_CHARS,
    ),
    Option(
        "vllm-eval-baseline-file",
        "Quality baseline saved by an earlier run with --vllm-eval-save; used when no --vllm-baseline-url is given.",
        kind="path",
        env="VLLM_CONFORMANCE_EVAL_BASELINE_FILE",
        metavar="PATH",
    ),
    Option(
        "vllm-eval-save",
        "Write the target's quality results (per item, with its version and model) to PATH, "
        "a baseline for --vllm-eval-baseline-file.",
        kind="path",
        env="VLLM_CONFORMANCE_EVAL_SAVE",
        metavar="PATH",
    ),
    Option(
        "vllm-perf-baseline-file",
        "Serving run saved by an earlier run with --vllm-perf-save on the same hardware: the serving suite's "
        "throughput baseline when no --vllm-baseline-url is given.",
        kind="path",
        env="VLLM_CONFORMANCE_PERF_BASELINE_FILE",
        metavar="PATH",
    ),
    Option(
        "vllm-perf-save",
        "Write the target's serving rounds (per request, with its version, model and workload) to PATH, "
        "a baseline for --vllm-perf-baseline-file.",
        kind="path",
        env="VLLM_CONFORMANCE_PERF_SAVE",
        metavar="PATH",
    ),
    Option(
        "vllm-serving-witness",
        "AIPerf's JSON summary (profile_export_aiperf.json) of a run of your own against the target: the serving "
        "suite's report shows its throughput, TTFT, time per output token and goodput beside ours.",
        kind="path",
        env="VLLM_CONFORMANCE_SERVING_WITNESS",
        metavar="PATH",
    ),
    Option(
        "vllm-eval-task",
        "An lm-eval task (or group) of your own for the quality suite (repeatable; env and ini: shell words).",
        kind="list",
        default=(),
        env="VLLM_CONFORMANCE_EVAL_TASKS",
        metavar="NAME",
    ),
    Option(
        "vllm-eval-include-path",
        "Directory of lm-eval task YAML files for --vllm-eval-task (repeatable; env and ini: shell words).",
        kind="list",
        default=(),
        env="VLLM_CONFORMANCE_EVAL_INCLUDE_PATH",
        metavar="DIR",
    ),
    Option(
        "vllm-eval-limit",
        "At most N items of each lm-eval task (lm-eval's --limit).",
        kind="int",
        env="VLLM_CONFORMANCE_EVAL_LIMIT",
        metavar="N",
        maximum=1_000_000,
    ),
    Option(
        "vllm-eval-tolerance",
        "How much worse than the baseline a task's score may be (absolute; default: the profile's "
        "quality.tolerance, else 0.05).",
        kind="float",
        env="VLLM_CONFORMANCE_EVAL_TOLERANCE",
        metavar="X",
        maximum=1,
    ),
    Option(
        "vllm-eval-confidence",
        "Confidence of the paired interval the quality gate decides on (default: the profile's "
        "quality.confidence, else 0.95).",
        kind="float",
        env="VLLM_CONFORMANCE_EVAL_CONFIDENCE",
        metavar="P",
        maximum=0.9999,
    ),
    Option(
        "vllm-eval-max-detectable-drop",
        "How far past the tolerance a drop may go before a quality comparison must be able to fail it; a blinder "
        "one is 'underpowered', a skip (default: the profile's quality.max_detectable_drop, else the tolerance).",
        kind="float",
        env="VLLM_CONFORMANCE_EVAL_MAX_DETECTABLE_DROP",
        metavar="D",
        maximum=1,
    ),
    Option(
        "vllm-eval-items",
        "Items in each shipped short-answer and multiple-choice set: the hand-written ones, then generated ones "
        "(default: the profile's quality.eval_items, else 200).",
        kind="int",
        env="VLLM_CONFORMANCE_EVAL_ITEMS",
        metavar="N",
        maximum=100_000,
    ),
    Option(
        "vllm-eval-long-context-items",
        "Retrieval documents per context length in the long-context set (default: the profile's "
        "quality.long_context_items, else 8).",
        kind="int",
        env="VLLM_CONFORMANCE_EVAL_LONG_CONTEXT_ITEMS",
        metavar="N",
        maximum=10_000,
    ),
    Option(
        "vllm-eval-tokenizer",
        "A local tokenizer (directory or file) for lm-eval's loglikelihood tasks (default: the server's "
        "/tokenizer_info or /tokenize; never a download).",
        kind="path",
        env="VLLM_CONFORMANCE_EVAL_TOKENIZER",
        metavar="PATH",
    ),
    Option(
        "vllm-gate",
        "How the run's exit status treats a claimed feature that was not fully checked (a skip, an undecided "
        "eval): 'report' leaves the exit status pytest's; 'strict' fails the run, for promotion gates.",
        kind="choice",
        default="report",
        choices=("report", "strict"),
        env="VLLM_CONFORMANCE_GATE",
        metavar="report|strict",
    ),
    Option(
        "vllm-ca-bundle",
        "CA certificates (PEM) to verify an HTTPS server with, e.g. a private CA (default: the system's).",
        kind="path",
        env="VLLM_CONFORMANCE_CA_BUNDLE",
        metavar="PATH",
    ),
    Option(
        "vllm-client-cert",
        "Client certificate (PEM) for servers that require mutual TLS; its key in the same file or --vllm-client-key.",
        kind="path",
        env="VLLM_CONFORMANCE_CLIENT_CERT",
        metavar="PATH",
    ),
    Option(
        "vllm-client-key",
        "Private key (PEM) of --vllm-client-cert, when not in the certificate file.",
        kind="path",
        env="VLLM_CONFORMANCE_CLIENT_KEY",
        metavar="PATH",
    ),
    Option(
        "vllm-trust-env",
        "Use the environment's proxies (HTTPS_PROXY, HTTP_PROXY, NO_PROXY) to reach the servers; "
        "without it every request goes straight to the URL given.",
        kind="flag",
        default=False,
        env="VLLM_CONFORMANCE_TRUST_ENV",
    ),
    Option(
        "vllm-list-contracts",
        "Print the catalogue of contracts (feature, id, versions, statement, when it is claimed) and exit.",
        kind="flag",
        default=False,
    ),
)
