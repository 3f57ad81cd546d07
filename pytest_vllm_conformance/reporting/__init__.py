"""What leaves the run: redaction of every secret, per-feature verdicts, report files, JUnit.

``redaction``    masks secrets in reports, log records, warnings and headers
``outcomes``     test reports -> one verdict per catalogue feature
``report_files`` the ``--vllm-report`` YAML and its Markdown twin
``junit``        the ``--junitxml`` file made valid under xunit2, and scrubbed
``hooks``        the pytest plugin object that ties them to a run
"""

from pytest_vllm_conformance.reporting.hooks import PLUGIN_NAME, ConformanceReporter
from pytest_vllm_conformance.reporting.redaction import MASK, LogRecordRedaction, Redactor

__all__ = ["MASK", "PLUGIN_NAME", "ConformanceReporter", "LogRecordRedaction", "Redactor"]
