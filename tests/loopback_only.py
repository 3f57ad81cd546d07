"""A pytest plugin (``-p tests.loopback_only``) that refuses every connection off this machine.

For runs that must prove they never reach the network (the quality suite's
lm-eval path: no Hub dataset, metric or tokenizer). Name lookups of other
hosts and connections to non-loopback addresses raise ``OSError`` and are
appended to the file named by ``LOOPBACK_ONLY_LOG``, so the calling test can
assert that nothing even tried.
"""

from __future__ import annotations

import os
import socket

LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
_getaddrinfo = socket.getaddrinfo
_connect = socket.socket.connect


def _refuse(what: object) -> None:
    log = os.environ.get("LOOPBACK_ONLY_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(f"{what}\n")
    raise OSError(f"loopback only: refused {what}")


def _guarded_getaddrinfo(host, *args, **kwargs):
    if host is not None and (host.decode() if isinstance(host, bytes) else host) not in LOCAL_HOSTS:
        _refuse(f"name lookup {host}")
    return _getaddrinfo(host, *args, **kwargs)


def _guarded_connect(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOCAL_HOSTS:
        _refuse(f"connect {address}")
    return _connect(sock, address)


socket.getaddrinfo = _guarded_getaddrinfo
socket.socket.connect = _guarded_connect
