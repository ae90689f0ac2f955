"""Secrets in URLs are masked as the regex ``(://[^:/@]*:)[^@]*@`` masks them, in one pass."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch.config.stream_settings import mask_url


def reference(url: str) -> str:
    """The previous definition: right, but quadratic when no ``@`` follows many ``://x:``."""
    return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", url)


PARTS = st.sampled_from(["://", ":", "/", "@", "a", "redis", "x@y", "::", "//", "secret"])


@settings(max_examples=3000, deadline=None)
@given(st.lists(PARTS, max_size=16))
def test_masking_is_the_reference_regex_s(parts: list[str]) -> None:
    url = "".join(parts)
    assert mask_url(url) == reference(url)


def test_a_password_is_masked_and_the_rest_kept() -> None:
    assert mask_url("redis://user:s3cret@redis:6379/0") == "redis://user:***@redis:6379/0"
    assert mask_url("rediss://:s3cret@host") == "rediss://:***@host"
    assert mask_url("redis://host:6379") == "redis://host:6379"
