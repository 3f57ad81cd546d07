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
