"""The embedded server's command line, without starting it."""

from pytest_vllm_conformance.connection.launcher import VllmServer


def _served_name(server: VllmServer) -> list[str]:
    command = server.command()
    return [arg for i, arg in enumerate(command) if i and command[i - 1] == "--served-model-name"] + [
        arg.split("=", 1)[1] for arg in command if arg.startswith("--served-model-name=")
    ]


def test_the_model_is_served_under_its_folder_name(tmp_path):
    # A path as model id would make captures from two machines differ in their model.
    server = VllmServer(tmp_path / "models" / "tiny-llama")
    assert _served_name(server) == [server.served_model] == ["tiny-llama"]


def test_a_name_given_by_the_user_wins(tmp_path):
    assert _served_name(VllmServer(tmp_path / "m", ("--served-model-name", "canary"))) == ["canary"]
    assert _served_name(VllmServer(tmp_path / "m", ("--served-model-name=canary",))) == ["canary"]
    assert VllmServer(tmp_path / "m", ("--served-model-name", "canary", "alias")).served_model == "canary"


def test_a_server_launched_ahead_is_ready_when_waited_for_after_its_deadline(tmp_path):
    # The pool launches a server ahead of its first use and waits for it later, maybe past its start-up deadline:
    # a server that answers /health then is ready, not "not healthy after N s" without a single look.
    import sys
    import time

    import httpx

    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import http.server, sys\n"
        "port = int(sys.argv[sys.argv.index('--port') + 1])\n"
        "class Health(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200); self.end_headers()\n"
        "    def log_message(self, *args):\n"
        "        pass\n"
        "http.server.HTTPServer(('127.0.0.1', port), Health).serve_forever()\n"
    )
    fake.chmod(0o755)
    server = VllmServer(tmp_path / "m", python=fake, startup_timeout=1.0, log_path=tmp_path / "serve.log").launch()
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{server.url}/health", timeout=1.0).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        time.sleep(1.2)  # past the start-up deadline, counted from the launch
        assert server.wait_ready() is server
    finally:
        server.stop()


def test_the_embedded_server_s_own_log_folder_is_removed_when_the_run_is_done(tmp_path):
    """No vllm-conformance-* folder is left in the temp dir after a run, unless --vllm-serve-log asked for a log."""
    from pytest_vllm_conformance.connection.connect import ServerConnection

    own = VllmServer(tmp_path / "m")
    folder = own.log_path.parent
    assert folder.is_dir() and folder.name.startswith("vllm-conformance-")
    ServerConnection(facts=None, base_url="http://127.0.0.1:1", server=own).close()  # type: ignore[arg-type]
    assert not folder.exists()
    asked = VllmServer(tmp_path / "m", log_path=tmp_path / "kept" / "serve.log")
    asked.log_path.parent.mkdir()
    asked.log_path.write_text("kept\n")
    ServerConnection(facts=None, base_url="http://127.0.0.1:1", server=asked).close()  # type: ignore[arg-type]
    assert asked.log_path.read_text() == "kept\n"
