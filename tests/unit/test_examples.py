"""The gateway recipes the docs show are the files our gateway tests run (examples/), not copies that drift."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "litellm"


def code_blocks(markdown: str, section: str, language: str) -> list[str]:
    body = markdown.split(section, 1)[1].split("\n### ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", body, flags=re.S)


def without_comments(text: str) -> list[str]:
    return [line.split("#", 1)[0].rstrip() for line in text.splitlines() if line.split("#", 1)[0].strip()]


def test_the_litellm_recipe_in_the_docs_is_the_one_our_tests_run():
    doc = (REPO / "docs" / "watermark-ingress.md").read_text()
    section = "### LiteLLM proxy: a pre-call hook (run in our tests)"
    (python,) = code_blocks(doc, section, "python")
    assert python in (EXAMPLES / "strip_watermarking.py").read_text()
    (yaml,) = code_blocks(doc, section, "yaml")
    config = without_comments((EXAMPLES / "config-strip-watermarking.yaml").read_text())
    assert all(line in config for line in without_comments(yaml)), (without_comments(yaml), config)


def test_a_gateway_or_old_release_named_relative_to_the_checkout_is_found_from_any_directory(monkeypatch, tmp_path):
    from fixtures import executable_from_env

    monkeypatch.chdir(REPO)  # where make runs the tests
    monkeypatch.setenv("VLLM_CONFORMANCE_LITELLM", ".venv-litellm/bin/litellm")
    found = executable_from_env("VLLM_CONFORMANCE_LITELLM")  # read at import, before any test moves
    monkeypatch.chdir(tmp_path)  # as pytester does, and as LiteLLM is started from examples/litellm
    assert found == str(REPO / ".venv-litellm" / "bin" / "litellm")
    monkeypatch.delenv("VLLM_CONFORMANCE_LITELLM")
    assert executable_from_env("VLLM_CONFORMANCE_LITELLM") is None


def test_the_nginx_entries_differ_only_by_affinity_and_nginx_accepts_them(tmp_path):
    import subprocess

    import pytest

    from fixtures.nginx_entry import NginxEntry, entry_config, nginx_executable

    replicas = ["http://127.0.0.1:18001", "http://127.0.0.1:18002"]
    round_robin, affinity = (entry_config(name, replicas, 18080) for name in ("round-robin.conf", "affinity.conf"))
    for config in (round_robin, affinity):
        assert "server 127.0.0.1:18001;" in config and "server 127.0.0.1:18002;" in config
        assert "listen 127.0.0.1:18080;" in config and "vllm-0" not in config
    assert "hash $http_x_session_affinity consistent;" in "\n".join(without_comments(affinity))
    assert "hash" not in "\n".join(without_comments(round_robin))
    if not nginx_executable():
        pytest.skip("nginx is not installed (make test-fleet installs it)")
    for name in ("round-robin.conf", "affinity.conf"):
        entry = NginxEntry(name, replicas)
        checked = subprocess.run(
            [str(entry.executable), "-t", "-c", str(entry.config), "-p", str(entry.folder), "-e", "stderr"],
            capture_output=True,
            text=True,
        )
        assert checked.returncode == 0, checked.stderr
