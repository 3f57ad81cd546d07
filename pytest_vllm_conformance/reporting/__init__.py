"""What leaves the run: redaction of every secret, per-feature verdicts, report files, JUnit.

``redaction``    masks secrets in reports, log records, warnings and headers
``outcomes``     test reports -> one verdict per catalogue feature
``report_files`` the ``--vllm-report`` YAML and its Markdown twin
``junit``        the ``--junitxml`` file made valid under xunit2, and scrubbed

The pytest plugin object that ties them to a run is ``plugin/reporter.py``.
"""

from pytest_vllm_conformance.reporting.redaction import MASK, LogRecordRedaction, Redactor

__all__ = ["MASK", "LogRecordRedaction", "Redactor"]
