"""What leaves the run: report headers, per-test properties, and redaction.

Every secret the run knows (API key, watermark key) is scrubbed from test
reports before any reporter (terminal, JUnit XML, report files) sees them,
including failure tracebacks that show local variables and captured output.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import pytest

MASK = "***"
# Authorization values are masked even when they are not one of our secrets
# (a wrong key in a test, a key echoed by a proxy).
_AUTH_HEADER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?(?:bearer|basic)?\s*)([^\s'\",}]+)")


class Redactor:
    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def add(self, secret: str) -> None:
        if secret and secret not in self.secrets:
            self.secrets = sorted([*self.secrets, secret], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        return _AUTH_HEADER.sub(lambda m: m.group(1) + MASK, text)

    def needed(self, text: str) -> bool:
        return self(text) != text

    def scrub_report(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if report.longrepr is not None:
            text = str(report.longrepr)
            if self.needed(text):
                # A plain string keeps every reporter (terminal, JUnit) on the redacted text.
                report.longrepr = self(text)
        report.sections = [(title, self(content)) for title, content in report.sections]
        if hasattr(report, "user_properties"):
            report.user_properties = [(name, self(str(value))) for name, value in report.user_properties]
