"""The latency picture: drawn beside the report and linked from the Markdown, or said why not."""

import builtins

from suites.serving import picture
from suites.serving.loadgen import RequestTiming, Round


def _round(ttft: float) -> Round:
    timings = tuple(
        RequestTiming(started=0.0, ended=1.0, status=200, token_times=[ttft + 0.01 * k for k in range(8)])
        for _ in range(6)
    )
    return Round(timings, 0.0, 1.0)


def test_the_picture_is_a_png_beside_the_report(tmp_path):
    path = picture.picture_path(tmp_path / "report.yaml", "latency")
    assert path == tmp_path / "report.serving-latency.png"
    assert picture.draw(path, [_round(0.05)], [_round(0.02)], "the saved run") is None
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_picture_is_not_drawn_and_the_reason_names_the_extra(tmp_path, monkeypatch):
    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    path = tmp_path / "report.serving-latency.png"
    why = picture.draw(path, [_round(0.05)], [], "")
    assert why and "[serving]" in why and not path.exists()


def test_the_markdown_report_links_a_test_s_picture_and_the_yaml_names_it(pytester, clean_env):
    pytester.makepyfile(
        "from pytest_vllm_conformance import contract\n"
        "@contract('discovery.max_model_len_published')\n"
        "def test_measured(vllm_record):\n"
        "    vllm_record('figures', 'TTFT p50 1 ms')\n"
        "    vllm_record('picture', 'report.serving-latency.png')\n"
    )
    pytester.runpytest("-p", "no:cacheprovider", "--vllm-report=report.yaml")
    markdown = (pytester.path / "report.md").read_text()
    assert "TTFT p50 1 ms [picture](report.serving-latency.png)" in markdown
    assert "picture: report.serving-latency.png" in (pytester.path / "report.yaml").read_text()
