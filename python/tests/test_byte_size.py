"""Byte counts as text (tessel/core/byte_size.h): the formatter of messages and the parser of
the environment variables and the CLI's size flags."""

import pytest

import tessel


@pytest.mark.parametrize("count, text", [
    (0, "0 B"),
    (512, "512 B"),
    (1023, "1023 B"),
    (1024, "1.0 KiB"),
    (1536, "1.5 KiB"),
    (100 << 20, "100.0 MiB"),
    (20 << 30, "20.0 GiB"),
    (3 << 40, "3.0 TiB"),
    (5 << 50, "5120.0 TiB"),  # TiB is the largest unit
])
def test_format_bytes(count, text):
    assert tessel.format_bytes(count) == text


@pytest.mark.parametrize("text, count", [
    ("4096", 4096),
    ("0", 0),
    ("4K", 4096),
    ("64M", 64 << 20),
    ("16MiB", 16 << 20),
    ("2g", 2 << 30),
    ("1TB", 1 << 40),
    ("7B", 7),
])
def test_parse_byte_size(text, count):
    assert tessel.parse_byte_size(text) == count


@pytest.mark.parametrize("text", ["", "lots", "1.5G", "-1", "+4", " 4", "4 K", "4Q", "4KiBs",
                                  "9223372036854775807K", "99999999999999999999"])
def test_parse_byte_size_rejects_what_is_not_a_whole_byte_count(text):
    assert tessel.parse_byte_size(text) is None


def test_what_format_bytes_prints_below_a_kib_parses_back():
    for count in (0, 1, 1000, 1023):
        assert tessel.parse_byte_size(tessel.format_bytes(count).replace(" ", "")) == count
