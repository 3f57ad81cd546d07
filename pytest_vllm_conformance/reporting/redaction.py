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
import re
import traceback
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

import pytest

MASK = "***"
# Header values are masked even when they are not one of our secrets. The
# scheme word is kept (it says what kind of credential was there). Source
# lines that build a header (``f"Bearer {key}"``) are left readable: a value
# that starts with "{" is a placeholder, and the groups before the value are
# atomic so that a quote prefix or the scheme word is never taken for the
# value instead. ``(b'authorization', b'Bearer k')`` is raw header-list form.
_HEADER_VALUE = re.compile(
    r"(?i)((?:proxy-)?authorization|x-api-key)((?>['\"]?\s*[:=]\s*(?:[rbfu]{0,2}['\"])?|['\"],\s*b?['\"]))"
    r"((?>(?:(?:bearer|basic|token|digest|negotiate|apikey)\s+)?))((?!\{)[^\s'\",}\]]+)"
)


def url_password(url: str | None) -> str | None:
    """The password of ``scheme://user:password@host``, if the URL has one."""
    if not url:
        return None
    try:
        return urlsplit(str(url)).password or None
    except ValueError:
        return None


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def add(self, secret: str | None) -> None:
        if secret and secret not in self.secrets:
            self.secrets = sorted([*self.secrets, secret], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return _HEADER_VALUE.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + MASK, text)

    def needed(self, text: str) -> bool:
        return self(text) != text

    # ---- test and collection reports ------------------------------------------

    def scrub_report(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        report.longrepr = self.scrub_longrepr(report.longrepr)
        report.sections = [(title, self(content)) for title, content in report.sections]
        if hasattr(report, "user_properties"):
            report.user_properties = [(name, self(str(value))) for name, value in report.user_properties]

    def scrub_longrepr(self, longrepr: Any) -> Any:
        """The same longrepr with every secret masked, keeping its structure where it can.

        Keeping pytest's repr objects (rather than flattening them to a string)
        keeps the one-line crash message that JUnit's ``message`` attribute and
        ``-r`` summaries show, and the terminal's colours.
        """
        if longrepr is None:
            return None
        if isinstance(longrepr, str):
            return self(longrepr)
        if isinstance(longrepr, tuple):  # a skip: (path, lineno, reason)
            return tuple(self(item) if isinstance(item, str) else item for item in longrepr)
        if not self.needed(str(longrepr)):
            return longrepr
        self._scrub_fields(longrepr, set())
        if self.needed(str(longrepr)):
            # A repr shape we do not know: a plain string still reads the same everywhere.
            return self(str(longrepr))
        return longrepr

    def _scrub_fields(self, obj: Any, seen: set[int]) -> None:
        if id(obj) in seen or not dataclasses.is_dataclass(obj) or isinstance(obj, type):
            return
        seen.add(id(obj))
        for field in dataclasses.fields(obj):
            value = getattr(obj, field.name)
            scrubbed = self._scrub_value(value, seen)
            if scrubbed is not value:
                object.__setattr__(obj, field.name, scrubbed)

    def _scrub_value(self, value: Any, seen: set[int]) -> Any:
        if isinstance(value, str):
            cleaned = self(value)
            return value if cleaned == value else cleaned
        if isinstance(value, list):
            value[:] = [self._scrub_value(item, seen) for item in value]
            return value
        if isinstance(value, tuple) and not hasattr(value, "_fields"):
            return tuple(self._scrub_value(item, seen) for item in value)
        if isinstance(value, dict):
            for key in list(value):
                value[key] = self._scrub_value(value[key], seen)
            return value
        self._scrub_fields(value, seen)
        return value

    # ---- log records -------------------------------------------------------------

    def scrub_log_record(self, record: logging.LogRecord) -> logging.LogRecord:
        try:
            message = record.getMessage()
        except Exception:  # a broken format string is the logging module's to report
            return record
        if self.needed(message):
            record.msg, record.args = self(message), ()
        if record.exc_info and not record.exc_text:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            if self.needed(text):
                # Formatters use exc_text when it is set instead of formatting exc_info again.
                record.exc_text = self(text)
        if record.stack_info and self.needed(record.stack_info):
            record.stack_info = self(record.stack_info)
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
        return self.redactor.scrub_log_record(record) if self._active else record

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
