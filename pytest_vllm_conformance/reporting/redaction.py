"""Redaction: no secret the run knows leaves it, whatever path the text takes.

The secrets are the values of every ``secret`` option (the API key, the
watermark key), the password of a URL given with credentials, and any
Authorization or X-API-Key header value, ours or not (a wrong key in a test,
a key echoed by a proxy). Text reaches the outside world by these paths,
and each is covered here:

- test and collection reports (failure tracebacks, ``-l`` locals, skip
  reasons, captured stdout/stderr/log sections, user properties), scrubbed
  before any reporter (terminal, JUnit, xdist, the report files) sees them;
- log records, scrubbed when they are created, so live logging
  (``--log-cli-level``), ``--log-file`` and caplog never hold a secret;
- warnings, scrubbed in the terminal's warning summary;
- the report header lines of every plugin.

Not covered: what a test writes straight to the terminal under ``-s``
(capture disabled), which never passes through pytest.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Callable
from typing import Any

import pytest

from pytest_vllm_conformance.connection.secrets import MASK, Redactor, url_password

__all__ = [
    "MASK",
    "LogRecordRedaction",
    "Redactor",
    "scrub_log_record",
    "scrub_longrepr",
    "scrub_report",
    "url_password",
]

# ---- test and collection reports ------------------------------------------


def scrub_report(redactor: Redactor, report: pytest.TestReport | pytest.CollectReport) -> None:
    report.longrepr = scrub_longrepr(redactor, report.longrepr)
    report.sections = [(title, redactor(content)) for title, content in report.sections]
    if isinstance(report, pytest.TestReport):
        report.user_properties = [(name, redactor(str(value))) for name, value in report.user_properties]


def scrub_longrepr(redactor: Redactor, longrepr: Any) -> Any:
    """The same longrepr with every secret masked, keeping its structure where it can.

    Keeping pytest's repr objects (rather than flattening them to a string)
    keeps the one-line crash message that JUnit's ``message`` attribute and
    ``-r`` summaries show, and the terminal's colours.
    """
    if longrepr is None:
        return None
    if isinstance(longrepr, str):
        return redactor(longrepr)
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, reason)
        return tuple(redactor(item) if isinstance(item, str) else item for item in longrepr)
    if not redactor.needed(str(longrepr)):
        return longrepr
    _scrub_fields(redactor, longrepr, set())
    if redactor.needed(str(longrepr)):
        # A repr shape we do not know: a plain string still reads the same everywhere.
        return redactor(str(longrepr))
    return longrepr


def _scrub_fields(redactor: Redactor, obj: Any, seen: set[int]) -> None:
    if id(obj) in seen or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
        return
    seen.add(id(obj))
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        scrubbed = _scrub_value(redactor, value, seen)
        if scrubbed is not value:
            object.__setattr__(obj, field.name, scrubbed)


def _scrub_value(redactor: Redactor, value: Any, seen: set[int]) -> Any:
    if isinstance(value, str):
        cleaned = redactor(value)
        return value if cleaned == value else cleaned
    if isinstance(value, list):
        value[:] = [_scrub_value(redactor, item, seen) for item in value]
        return value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_scrub_value(redactor, item, seen) for item in value)
    if isinstance(value, dict):
        for key in list(value):
            value[key] = _scrub_value(redactor, value[key], seen)
        return value
    _scrub_fields(redactor, value, seen)
    return value


# ---- log records -------------------------------------------------------------


def scrub_log_record(redactor: Redactor, record: logging.LogRecord) -> logging.LogRecord:
    try:
        message = record.getMessage()
    except Exception:  # a broken format string is the logging module's to report
        return record
    if redactor.needed(message):
        record.msg, record.args = redactor(message), ()
    if record.exc_info and not record.exc_text:
        text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if redactor.needed(text):
            # Formatters use exc_text when it is set instead of formatting exc_info again.
            record.exc_text = redactor(text)
    if record.stack_info and redactor.needed(record.stack_info):
        record.stack_info = redactor(record.stack_info)
    return record


class LogRecordRedaction:
    """Scrubs every log record of the process as it is created.

    A record factory rather than a handler filter: pytest's live-logging,
    log-file and capture handlers come and go during a run, and a filter on
    one of them would miss the others. A record is created only when a logger
    is enabled for its level, so disabled debug logging costs nothing.
    """

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor
        self._previous: Callable[..., logging.LogRecord] = logging.LogRecord
        self._active = False

    def _factory(self, *args: Any, **kwargs: Any) -> logging.LogRecord:
        record = self._previous(*args, **kwargs)
        # Another factory installed after ours may keep calling us once we are
        # uninstalled: then we only pass records through.
        return scrub_log_record(self.redactor, record) if self._active else record

    def install(self) -> None:
        if not self._active:
            self._previous = logging.getLogRecordFactory()
            logging.setLogRecordFactory(self._factory)
            self._active = True

    def uninstall(self) -> None:
        if not self._active:
            return
        self._active = False
        if logging.getLogRecordFactory() == self._factory:
            logging.setLogRecordFactory(self._previous)
