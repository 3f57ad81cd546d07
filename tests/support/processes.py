"""The processes of a running vLLM server, found through /proc (a fault proof stops one)."""

from pathlib import Path


def engine_core(api_server_pid: int) -> int:
    """The pid of the API server's descendant vLLM titles EngineCore (setproctitle: VLLM::EngineCore)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    todo, found = [api_server_pid], []
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            todo.append(child)
            try:
                if b"EngineCore" in Path(f"/proc/{child}/cmdline").read_bytes():
                    found.append(child)
            except OSError:
                continue
    assert len(found) == 1, f"expected one EngineCore process under pid {api_server_pid}, found {found}"
    return found[0]
