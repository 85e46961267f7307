"""What the installed SDKs do where their releases differ, so that a test asserts each release's behaviour.

docs/design.md (Development, The SDK behaviours simloop depends on) lists them; `make test-floor` and
`make test-latest` run the suite on the oldest and newest releases the ranges admit.
"""

from __future__ import annotations

from importlib.metadata import version

import anthropic
import httpx2
from packaging.version import Version

ANTHROPIC = Version(version("anthropic"))

#: anthropic 2.17 wraps a failure to read a streamed body in ``APIConnectionError`` (``_streaming.py``,
#: ``_make_connection_error``); before it, the HTTP library's own error escaped the SDK unwrapped.
STREAM_CUT_WRAPPED = ANTHROPIC >= Version("2.17")
STREAM_CUT_ERROR: type[Exception] = anthropic.APIConnectionError if STREAM_CUT_WRAPPED else httpx2.RemoteProtocolError
