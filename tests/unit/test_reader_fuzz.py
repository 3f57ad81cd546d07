"""A short, fixed fuzz of every reader and option parser (issue 41): the long run is bench/fuzz_readers.py.

Derandomized, so CI sees the same few hundred inputs every time; each must be
read, or refused with the reader's own one line, within the memory bound.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fixtures import reader_fuzz

SHORT = settings(
    max_examples=40,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("name", list(reader_fuzz.READERS))
def test_a_reader_reads_or_refuses_in_one_line(name):
    seed = reader_fuzz.READERS[name][0]
    assert reader_fuzz.read(name, seed.encode()) == "read"  # the seed itself is valid

    @SHORT
    @given(reader_fuzz.file_contents(seed))
    def fuzz(content):
        reader_fuzz.read(name, content)

    fuzz()


@SHORT
@given(st.data())
def test_every_option_parser_reads_or_refuses_in_one_line(data):
    option = data.draw(st.sampled_from(reader_fuzz.VALUE_OPTIONS))
    reader_fuzz.parse(option, data.draw(reader_fuzz.option_values(option)))


@SHORT
@given(st.data())
def test_a_key_is_read_as_one_header_line_or_refused_without_showing_it(data):
    option = data.draw(st.sampled_from([option for option in reader_fuzz.VALUE_OPTIONS if option.secret]))
    reader_fuzz.parse(option, data.draw(reader_fuzz.option_values(option)))


@SHORT
@given(reader_fuzz.output_paths())
def test_a_merge_output_is_written_or_refused_and_never_replaces_an_input_a_link_or_a_device(given_path):
    reader_fuzz.merge_into(given_path)


@pytest.mark.parametrize(
    ("given_path", "outcome"),
    [
        ("new.yaml", "written"),
        ("link-to-new", "written"),
        ("to-null", "written"),
        ("/dev/null", "written"),
        ("link-to-shard", "refused"),
        ("folder/../shard.yaml", "refused"),
        ("folder", "refused"),
        ("dangling", "written"),
        ("new.yaml\x00", "refused"),
        ("x" * 300, "refused"),
    ],
)
def test_the_output_paths_a_user_gives_most(given_path, outcome):
    assert reader_fuzz.merge_into(given_path) == outcome
