"""DNS names as apimachinery validates them: the problems a value has, worded as upstream words them.

Object names (`metadata.name`: a subdomain, a label for namespaces, a DNS-1035 label for
services, a path segment for RBAC objects and APIServices), CRD names and groups, and the CEL
library's `isDNS...` checks all read these, so one wording serves them all. Each `*_problems`
function returns the messages of what is wrong (empty: valid), in upstream's order: the length
first, then the pattern with its examples.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Final

DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
DNS1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

LABEL_RULE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and "
    "end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
SUBDOMAIN_RULE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS1035_RULE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")
"""The pattern rules; the double space after the first example is upstream's (its RegexError)."""


@lru_cache(maxsize=65536)
def label_problems(value: str) -> tuple[str, ...]:
    """What is wrong with `value` as an RFC 1123 label (a namespace's name)."""
    return _problems(value, 63, DNS1123_LABEL, LABEL_RULE)


@lru_cache(maxsize=65536)
def subdomain_problems(value: str) -> tuple[str, ...]:
    """What is wrong with `value` as an RFC 1123 subdomain (most objects' names, API groups)."""
    return _problems(value, 253, DNS1123_SUBDOMAIN, SUBDOMAIN_RULE)


@lru_cache(maxsize=65536)
def dns1035_problems(value: str) -> tuple[str, ...]:
    """What is wrong with `value` as a DNS-1035 label (a Service's name, a CRD's plural)."""
    return _problems(value, 63, DNS1035_LABEL, DNS1035_RULE)


@lru_cache(maxsize=65536)
def path_segment_problems(value: str) -> tuple[str, ...]:
    """What is wrong with `value` as one URL path segment (RBAC objects' names: `system:node` is valid)."""
    if value in (".", ".."):
        return (f"may not be '{value}'",)
    return tuple(f"may not contain '{c}'" for c in ("/", "%") if c in value)


@lru_cache(maxsize=65536)
def api_service_name_problems(value: str) -> tuple[str, ...]:
    """What is wrong with `value` as an APIService's name: a path segment of the form `<version>.<group>`."""
    out = path_segment_problems(value)
    return out if "." in value else (*out, "must be in the form: <version>.<group>")


def _problems(value: str, limit: int, pattern: re.Pattern[str], rule: str) -> tuple[str, ...]:
    out = (f"must be no more than {limit} characters",) if len(value) > limit else ()
    return (*out, rule) if not pattern.fullmatch(value) else out
