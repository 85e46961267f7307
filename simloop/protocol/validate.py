"""The real Messages API's request rules, answered with its exact 400 texts.

The simulator runs every request a loop sends through `validate_messages_request`
(or `validate_count_tokens_request`).  A request the real API would refuse gets a
`Rejection` carrying the status, error type and message text the real API uses
(sources and confidence: ``shared/research/wire.md`` section 2), so a loop sees
the same `anthropic.BadRequestError` it would see in production.  A request the
real API accepts must pass: the fidelity test replays every recorded request in
the cassette corpus through this module and demands zero false rejections.

The rules are a table (`RULES`): one small function per rule, named for what it
checks, with the 400 text it answers beside it, listed in the order the real API
reports them (the schema layer: the body, its fields, every message's shape,
``thinking``, ``tools``; then the request's rules: tool names, content blocks and
ids, tool pairing, server tools, cache breakpoints, thinking and signatures).  One
short loop walks the table and the first rule that finds an offence gives the 400.
A new rule is one function in its place in `RULES` and one test.

Why plain Python over the parsed dict and not pydantic models: this runs on every
simulated request and the simulator's overhead budget is a few percent of an SDK
call.  The messages are walked once (`_messages_shape`): schema-style errors
(pydantic-like paths such as ``messages.1.content.0.tool_use.id``) are raised at
once, and the walk remembers the first offence of each later rule for that rule
to report in its turn (`_Walk`).

The context window is `context_window` (the server checks it once it has counted
a request's tokens).  Deliberately *not* modelled: per-model capabilities (prefill
refused by newer models, effort levels, ``temperature`` deprecation, unknown model
names), and the legacy rules the API has dropped (first
message must be ``user``, roles must alternate: consecutive same-role turns are
now merged).  Unknown top-level fields and unknown server tool types pass.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CONTEXT_1M_BETA",
    "ConversationValidator",
    "Rejection",
    "check_signatures",
    "context_window",
    "opaque_bytes",
    "prompt_too_long",
    "thinking_signature",
    "validate_count_tokens_request",
    "validate_messages_request",
]

_INVALID = "invalid_request_error"

#: The beta that opens the 1M-token window to a model that has it behind the opt-in (Sonnet 4 and 4.5).
CONTEXT_1M_BETA = "context-1m-2025-08-07"
DEFAULT_WINDOW = 200_000
LARGE_WINDOW = 1_000_000
# Models whose window is 1M tokens without the beta (the 4.6 generation on, and the fives), and those that open
# it with the beta.  Unknown names get the default: every model the API has served takes at least 200k.
_LARGE = re.compile(r"^claude-(?:opus-4-[6-9]|sonnet-4-[6-9]|(?:opus|sonnet|haiku|fable|mythos)-5)(?![0-9])")
_LARGE_WITH_BETA = re.compile(r"^claude-sonnet-4(?:-5)?(?![0-9])")
#: The OpenAI models whose input window is not the default, by name prefix: gpt-4o and gpt-4o-mini (and
#: gpt-4-turbo), 128,000 tokens, as their 400 says ("This model's maximum context length is 128000 tokens. However,
#: your messages resulted in 192041 tokens.": assafelovic/gpt-researcher#680, Integuru-AI/Integuru#30 on gpt-4o);
#: the gpt-4.1 family 1,047,576 (its model card: pamelafox/openai-messages-token-helper#25, zed-industries/zed#28708);
#: the gpt-5 family 272,000 of input (a 400,000 window less 128,000 of output: coder/mux#1223).  o1, o3 and o4-mini
#: have the default 200,000.
_OPENAI_WINDOWS = (
    (re.compile(r"^(?:gpt-4o|chatgpt-4o|gpt-4-turbo)(?![0-9])"), 128_000),
    (re.compile(r"^gpt-4\.1(?![0-9])"), 1_047_576),
    (re.compile(r"^gpt-5(?![0-9])"), 272_000),
)


def context_window(model: Any, betas: str = "") -> int:
    """The model's input window in tokens: 1M for the models that have it (natively, or with `CONTEXT_1M_BETA`
    among the request's ``anthropic-beta`` values), the OpenAI models' own (`_OPENAI_WINDOWS`), 200k otherwise."""
    name = model if isinstance(model, str) else ""
    key = (name, betas)
    window = _WINDOWS.get(key)
    if window is None:  # worked out once per model name and beta header (the server asks on every call)
        if len(_WINDOWS) >= 256:
            _WINDOWS.clear()
        window = _WINDOWS[key] = _context_window(name, betas)
    return window


_WINDOWS: dict[tuple[str, str], int] = {}


def _context_window(name: str, betas: str) -> int:
    if _LARGE.match(name):
        return LARGE_WINDOW
    if _LARGE_WITH_BETA.match(name) and CONTEXT_1M_BETA in (b.strip() for b in betas.split(",")):
        return LARGE_WINDOW
    return next((window for prefix, window in _OPENAI_WINDOWS if prefix.match(name)), DEFAULT_WINDOW)


#: What an image costs at most (its pixels / 750, capped by the API's resizing): base64 sources are counted so,
#: never by their bytes, which would take a photo for a book.
IMAGE_TOKENS = 1_600


def opaque_bytes(value: Any) -> tuple[int, int]:
    """(bytes, sources): the JSON bytes of what the model does not read as text (base64 image and document data,
    thinking signatures, encrypted and redacted content), and how many base64 sources there are.  The window
    check takes them out of the byte estimate (counting each source as `IMAGE_TOKENS`): only a request already
    over the window by its bytes is walked."""
    size = sources = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if item.get("type") == "base64" and isinstance(item.get("data"), str):
                size += len(item["data"])
                sources += 1
            for key in ("signature", "encrypted_content"):
                if isinstance(item.get(key), str):
                    size += len(item[key])
            if item.get("type") == "redacted_thinking" and isinstance(item.get("data"), str):
                size += len(item["data"])
            stack.extend(v for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend(v for v in item if isinstance(v, (dict, list)))
    return size, sources


def prompt_too_long(tokens: int, window: int) -> Rejection:
    """The real API's 400 for a prompt over the model's window (research/wire.md: context overflow)."""
    return Rejection(400, _INVALID, f"prompt is too long: {tokens} tokens > {window} maximum", None)
_ID_PATTERN = "^[a-zA-Z0-9_-]+$"
_ID_RE = re.compile(r"[a-zA-Z0-9_-]+")
_TOOL_NAME_PATTERN = "^[a-zA-Z0-9_-]{1,128}$"
_TOOL_NAME_RE = re.compile(r"[a-zA-Z0-9_-]{1,128}")
_NOT_OBJECT = "Input should be a valid dictionary or object to extract fields from"
_NO_TAG = "Unable to extract tag using discriminator 'type'"

# Content block types accepted inside user/assistant messages.  Server-tool
# result kinds keep multiplying, so any ``*_tool_use`` / ``*_tool_result`` type is
# accepted as well (the recorded corpus is the judge); output-only blocks such as
# ``fallback`` are refused like the real API refuses them.
_BLOCK_TYPES = frozenset(
    {
        "text", "image", "document", "search_result", "thinking", "redacted_thinking",
        "tool_use", "tool_result", "server_tool_use", "mcp_tool_use", "mcp_tool_result",
        "web_search_tool_result", "web_fetch_tool_result", "code_execution_tool_result",
        "bash_code_execution_tool_result", "text_editor_code_execution_tool_result",
        "tool_search_tool_result", "advisor_tool_result", "container_upload", "compaction",
    }
)  # fmt: skip
_BLOCK_TAGS = ", ".join(f"'{t}'" for t in sorted(_BLOCK_TYPES))
_TOOL_RESULT_CONTENT_TYPES = frozenset(
    {"text", "image", "document", "search_result", "tool_reference", "browser_state"}
)
_TOOL_RESULT_CONTENT_TAGS = ", ".join(f"'{t}'" for t in sorted(_TOOL_RESULT_CONTENT_TYPES))
_THINKING_TYPES = ("adaptive", "between_tools", "disabled", "enabled")
_THINKING_TAGS = ", ".join(f"'{t}'" for t in _THINKING_TYPES)
_THINKING_BLOCKS = ("thinking", "redacted_thinking")
_NO_USES: list[tuple[int, int, str]] = []  # shared, never mutated


# -- the 400 texts of the request's rules (those of the schema layer are in each rule's docstring) -----------------
_MSG_AT_LEAST_ONE = "messages: at least one message is required"
_MSG_TEMPERATURE = "`temperature` may only be set to 1 when thinking is enabled."
_MSG_UNIQUE_TOOL_NAMES = "tools: Tool names must be unique."
_MSG_EMPTY_CONTENT = (
    "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
)
_MSG_NONEMPTY_TEXT = "messages: text content blocks must be non-empty"
_MSG_WHITESPACE_TEXT = "messages: text content blocks must contain non-whitespace text"
_MSG_UNIQUE_IDS = "messages.{i}.content.{j}: `tool_use` ids must be unique"
# (The 2024 rule "Requests which include `tool_use` or `tool_result` blocks must define tools." is not
# enforced any more: a 2026 recording with tool blocks and no `tools` was answered 200, issue 19 item 6.)
_MSG_STRAY_RESULT = (
    "messages.{i}.content.{j}: unexpected `tool_use_id` found in `tool_result` blocks: {ids}. "
    "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
)
_MSG_MISSING_RESULT = (
    "messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: {ids}. "
    "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
)
_MSG_THINKING_FIRST = (
    "Expected `thinking` or `redacted_thinking`, but found `{found}`. When `thinking` is enabled, a final "
    "`assistant` message must start with a thinking block (preceeding the lastmost set of `tool_use` and "
    "`tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this "
    "requirement, disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
_MSG_THINKING_DISABLED = (
    "When thinking is disabled, an `assistant` message in the final position cannot contain `thinking`. "
    "To use thinking blocks, enable `thinking` in your request."
)
_MSG_BAD_SIGNATURE = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
# Not in wire.md: quoted from the real API's 400s in third-party production logs (a paused web search
# sent back followed by a "Continue." user turn: "messages.1: `web_search` tool use with id srvtoolu_...
# was found without a corresponding `web_search_tool_result` block"; the same for `code_execution`).
# The index is the assistant message holding the call.
_MSG_SERVER_UNANSWERED = (
    "messages.{i}: `{name}` tool use with id {id} was found without a corresponding `{name}_tool_result` block"
)
# Not in wire.md: the real API's 400 as quoted verbatim (JSON body) in several third-party repositories.
_MSG_CACHE_BREAKPOINTS = "A maximum of 4 blocks with cache_control may be provided. Found {n}."
_MAX_BREAKPOINTS = 4

# Simulator-issued thinking signatures: an HMAC over the thinking text under a
# fixed key, so a loop that edits a thinking block before sending it back is
# caught exactly like the real API catches it.  Not a secret: determinism is the point.
_SIGNING_KEY = b"simloop/thinking-signature/v1"


@dataclass(frozen=True, slots=True)
class Rejection:
    """A request the real API refuses: status, error type and its exact message.

    ``path`` is the machine-readable location for reports (``messages[1].content[0]``);
    ``details`` is the envelope's optional ``error.details`` object.
    """

    status: int
    type: str
    message: str
    details: dict[str, Any] | None = None
    path: str | None = None


class _Reject(Exception):
    """Internal: unwinds the walk at the first schema-level error."""

    def __init__(self, message: str, path: str | None) -> None:
        super().__init__(message)
        self.rejection = Rejection(400, _INVALID, message, None, path)



_Uses = list[tuple[int, int, str]]  # tool_use blocks: (message, block, id)
_Results = list[tuple[int, int, str, bool]]  # tool_result blocks: (message, block, id, in the leading run)
# A closed turn (consecutive same-role messages merged, as the API merges them), for the thinking rules:
# (role, first block as (message, block, type) or None, its tool_use blocks, its tool_result blocks).
_TurnInfo = tuple[str, "tuple[int, int, Any] | None", _Uses, _Results]


class _Walk:
    """The walk over a request's messages so far: the closed turns, the open one, and the first offence of each
    kind the rules after the walk report (in the real API's order, not the walk's).  A `ConversationValidator`
    keeps one between the requests of a conversation.  (Attributes, not an object per turn: the walk is the
    simulator's hot path.)"""

    __slots__ = ("block_error", "first", "pairing_error", "prefix_open", "prev_uses", "results", "role", "seen_ids",
                 "signature_error", "turns", "uses")  # fmt: skip

    def __init__(self) -> None:
        self.turns: list[_TurnInfo] = []  # the closed turns
        self.role: Any = None  # the open turn's role (None before the first user or assistant message)
        self.first: tuple[int, int, Any] | None = None  # the open turn's first block
        self.uses: _Uses = []  # the open turn's tool_use blocks
        self.results: _Results = []  # the open turn's tool_result blocks
        self.prefix_open = True  # the open turn is still inside its leading run of tool_result blocks
        self.prev_uses: _Uses = _NO_USES  # the tool_use blocks of the turn before the open one, if an assistant's
        self.pairing_error: Rejection | None = None  # the first tool_use/tool_result pairing offence
        self.block_error: Rejection | None = None  # the first empty-text, empty-content or duplicate-id offence
        self.signature_error: Rejection | None = None  # the first thinking block the simulator did not sign
        self.seen_ids: set[str] = set()  # the tool_use ids so far

    def copy(self) -> _Walk:
        """A copy to resume from (the walk goes on after it)."""
        new = _Walk.__new__(_Walk)
        new.turns, new.role, new.first, new.prefix_open = self.turns[:], self.role, self.first, self.prefix_open
        new.uses, new.results, new.seen_ids = self.uses[:], self.results[:], set(self.seen_ids)
        new.prev_uses, new.pairing_error, new.block_error = self.prev_uses, self.pairing_error, self.block_error
        new.signature_error = self.signature_error
        return new

    def all_turns(self) -> list[_TurnInfo]:
        """The closed turns and the open one (the last), for the rules after the walk."""
        return [*self.turns, (self.role, self.first, self.uses, self.results)] if self.role is not None else self.turns

    def last_pairing_error(self) -> Rejection | None:
        """The first pairing offence, the open turn's included (it closes the request)."""
        if self.pairing_error is None and self.role == "user" and (self.prev_uses or self.results):
            return _check_pair(self.prev_uses, self.results)
        return self.pairing_error


@functools.lru_cache(maxsize=4096)  # a conversation resends its history: the same texts again and again
def thinking_signature(thinking: str) -> str:
    """Return the signature the simulator attaches to a thinking block with this text.

    Deterministic and shaped like a real signature (base64), e.g.
    ``thinking_signature("Let me check.")`` is the same string in every run.
    """
    mac = hmac.new(_SIGNING_KEY, thinking.encode("utf-8"), hashlib.sha256).digest()
    tail = hashlib.sha256(mac).digest()
    return base64.b64encode(b"\x12\x40" + mac + tail).decode("ascii")


def validate_messages_request(body: Any, *, signed_by_sim: bool = False) -> Rejection | None:
    """Check a ``POST /v1/messages`` body (already ``json.loads``-ed) like the real API.

    Returns None when the real API would accept it, else the `Rejection` it would
    answer.  With ``signed_by_sim=True`` every ``thinking`` block must carry the
    signature `thinking_signature` gives its text (use it when the simulator produced
    every assistant turn; real recorded signatures are Anthropic's and fail it).
    """
    return _answer(_Request(body, True, signed_by_sim, None))


class ConversationValidator:
    """`validate_messages_request` for the successive requests of one conversation, walking only what is new.

    A loop resends its whole history on every call, so validating each request from scratch costs time
    quadratic in the conversation's length.  This keeps the walk's state from the previous request: after
    its last message, or just before it when that is an assistant message (the only kind the final-message
    rules treat specially).  When the next request's messages start with messages equal to those, the walk
    resumes there.  Equal messages give the same state, so the answer is exactly `validate_messages_request`'s.
    What is compared is what was sent: the validator keeps its own copy of the messages it walked, so a
    caller that edits an earlier message in place (the same objects, new contents) gets a fresh walk, not
    a stale answer.  The ``tools`` check is reused the same way (on a copy too).  With ``read_only=True`` (the
    simulator's parses, shared between requests and never changed) the same objects are kept instead of a copy,
    and an unchanged history compares equal by identity.

    Example::

        validator = ConversationValidator(signed_by_sim=True)
        for body in requests:            # each one the previous one's messages plus the new turn
            rejection = validator.validate(body)
    """

    __slots__ = ("_resume", "_servertools", "_tools", "read_only", "signed_by_sim")

    def __init__(self, *, signed_by_sim: bool = False, read_only: bool = False) -> None:
        self.signed_by_sim = signed_by_sim
        #: The bodies are never changed after they are validated (the simulator's own parses, which it shares
        #: between requests): what was walked is kept as the same objects, not copied, and compared by identity
        #: first.  The answers are the same; a caller that edits a validated body in place must leave it False.
        self.read_only = read_only
        # (index, a copy of the messages before it as they were sent, the walk there)
        self._resume: tuple[int, list[Any], _Walk] | None = None
        self._tools: tuple[Any, Rejection | None] | None = None  # (a copy of the tools, what _check_tools returned)
        self._servertools: _ServerToolScan | None = None  # `_server_scan`'s walk so far

    def validate(self, body: Any) -> Rejection | None:
        """Check a ``POST /v1/messages`` body; same answer as `validate_messages_request`."""
        return _answer(_Request(body, True, self.signed_by_sim, self))


def validate_count_tokens_request(body: Any, *, signed_by_sim: bool = False) -> Rejection | None:
    """Check a ``POST /v1/messages/count_tokens`` body: the messages rules without ``max_tokens``."""
    return _answer(_Request(body, False, signed_by_sim, None))


def check_signatures(body: Any) -> Rejection | None:
    """Return the rejection for the first thinking block not signed by `thinking_signature`, if any.

    For a body that already passed validation; it does not re-check anything else.
    """
    messages = body.get("messages") if type(body) is dict else None
    if type(messages) is not list:
        return None
    for i, message in enumerate(messages):
        content = message.get("content") if type(message) is dict else None
        if type(content) is not list:
            continue
        for j, block in enumerate(content):
            if type(block) is dict and block.get("type") == "thinking":
                text, signature = block.get("thinking"), block.get("signature")
                if type(text) is str and signature != thinking_signature(text):
                    return _rejection(_MSG_BAD_SIGNATURE.format(i=i, j=j), i, j)
    return None
# --------------------------------------------------------------------------- internals


def _rejection(message: str, i: int | None = None, j: int | None = None, field: str | None = None) -> Rejection:
    return Rejection(400, _INVALID, message, None, _path(i, j, field))


def _path(i: int | None, j: int | None = None, field: str | None = None) -> str | None:
    if i is None:
        return field
    path = f"messages[{i}]" if j is None else f"messages[{i}].content[{j}]"
    return f"{path}.{field}" if field else path


def _fail(message: str, i: int | None = None, j: int | None = None, field: str | None = None) -> _Reject:
    return _Reject(message, _path(i, j, field))


def _is_int(value: Any) -> bool:
    # pydantic's lax int: JSON 1024.0 is an integer, true/false and strings are not.
    return type(value) is int or (type(value) is float and value.is_integer())


def _field_error(
    block: dict[str, Any], tag: str, name: str, i: int, j: int, wrong: str = "Input should be a valid string"
) -> _Reject:
    """The pydantic-style error for a block field that is missing or of the wrong type."""
    problem = "Field required" if block.get(name) is None else wrong
    return _fail(f"messages.{i}.content.{j}.{tag}.{name}: {problem}", i, j, name)


def _id_error(block: dict[str, Any], tag: str, name: str, i: int, j: int) -> _Reject:
    if type(block.get(name)) is not str:
        return _field_error(block, tag, name, i, j)
    return _fail(f"messages.{i}.content.{j}.{tag}.{name}: String should match pattern '{_ID_PATTERN}'", i, j, name)



# --------------------------------------------------------------------------- the rules, in the API's order


class _Request:
    """One request as the rules read it: the body, and what earlier rules found for the later ones."""

    __slots__ = ("body", "memo", "needs_max_tokens", "scan", "signed_by_sim", "thinking_type", "tool_names_error",
                 "walk")  # fmt: skip
    walk: _Walk  # `_messages_shape`'s walk, set by it

    def __init__(self, body: Any, needs_max_tokens: bool, signed_by_sim: bool, memo: ConversationValidator | None):
        self.body: dict[str, Any] = body  # a dict once `_body_is_an_object` has passed
        self.needs_max_tokens = needs_max_tokens  # False for count_tokens
        self.signed_by_sim = signed_by_sim
        self.memo = memo  # the conversation's validator, whose kept walks this request may resume
        self.thinking_type: str | None = None  # `_thinking_setting`'s
        self.tool_names_error: Rejection | None = None  # `_tool_definitions`'
        self.scan: _ServerToolScan | None = None  # `_server_scan`'s


def _answer(request: _Request) -> Rejection | None:
    """Walk `RULES` in order: the first rule that finds an offence gives the 400 (None: every rule passed)."""
    try:
        for rule in RULES:
            rejection = rule(request)
            if rejection is not None:
                return rejection
    except _Reject as exc:  # a schema error raised from inside a walk (a message, a block, a tool)
        return exc.rejection
    return None


def _body_is_an_object(r: _Request) -> Rejection | None:
    """The body is a JSON object: "Input should be a valid dictionary or object to extract fields from"."""
    return None if type(r.body) is dict else _rejection(_NOT_OBJECT)


def _required_fields(r: _Request) -> Rejection | None:
    """``max_tokens`` (not for count_tokens), ``messages`` and ``model`` are there: "max_tokens: Field required"."""
    get = r.body.get
    if r.needs_max_tokens and get("max_tokens") is None:
        return _rejection("max_tokens: Field required", field="max_tokens")
    if get("messages") is None:
        return _rejection("messages: Field required", field="messages")
    if get("model") is None:
        return _rejection("model: Field required", field="model")
    return None


def _field_types(r: _Request) -> Rejection | None:
    """"max_tokens: Input should be a valid integer", "messages: Input should be a valid list", "model: Input
    should be a valid string"."""
    get = r.body.get
    if r.needs_max_tokens and not _is_int(get("max_tokens")):
        return _rejection("max_tokens: Input should be a valid integer", field="max_tokens")
    if type(get("messages")) is not list:
        return _rejection("messages: Input should be a valid list", field="messages")
    if type(get("model")) is not str:
        return _rejection("model: Input should be a valid string", field="model")
    return None


# The request fields below (issue 19 item 7: cases a fuzzer found the real API refuses) are checked like
# the API's schema layer checks them: at once, in pydantic's wording with the API's path style.  Real
# texts where known (research wire.md section 2 and quoted API bodies, marked "real"), else pydantic's
# standard message for that field type (marked "pydantic"), which is the wording the API's schema
# errors use everywhere they are documented (``max_tokens: Field required``, ``...: Input should be a
# valid integer``).
_CACHE_TAGS = "'ephemeral'"
_TOOL_CHOICE_TYPES = ("any", "auto", "none", "tool")
_TOOL_CHOICE_TAGS = ", ".join(f"'{t}'" for t in _TOOL_CHOICE_TYPES)


def _max_tokens_at_least_one(r: _Request) -> Rejection | None:
    """"max_tokens: Input should be greater than or equal to 1" (pydantic; the fuzzed real API refused 0 and
    negatives.  SDK 2.x docstrings mention max_tokens 0 for cache pre-warming; the measured API answered 400.)"""
    if r.needs_max_tokens and r.body["max_tokens"] < 1:
        return _rejection("max_tokens: Input should be greater than or equal to 1", field="max_tokens")
    return None


def _optional_fields(r: _Request) -> Rejection | None:
    """The optional top-level fields the body sets, each checked by its rule in `FIELD_RULES`, in that order."""
    body = r.body
    for field, rule in FIELD_RULES:
        value = body.get(field)
        if value is not None:
            rejection = rule(value, body)
            if rejection is not None:
                return rejection
    return None


def _system_field(system: Any, body: dict[str, Any]) -> Rejection | None:
    """``system`` is a string or a list of text blocks: "system: Input should be a valid list", "system.0.type:
    Input should be 'text'", "system.0.text: Field required" (pydantic)."""
    if type(system) is not str:
        if type(system) is not list:
            return _rejection("system: Input should be a valid list", field="system")
        for k, block in enumerate(system):
            _check_system_block(block, k)
    return None


def _tool_choice_field(tool_choice: Any, body: dict[str, Any]) -> Rejection | None:
    """``tool_choice`` is one of its tagged kinds, naming a listed tool: "tool_choice: Input tag 'x' found using
    'type' does not match any of the expected tags: 'any', 'auto', 'none', 'tool'", "Tool 'x' not found in
    provided tools" (real)."""
    _check_tool_choice(tool_choice, body.get("tools"))
    return None


def _metadata_field(metadata: Any, body: dict[str, Any]) -> Rejection | None:
    """``metadata`` is an object whose ``user_id`` is a string: "metadata.user_id: Input should be a valid string"
    (pydantic)."""
    if type(metadata) is not dict:
        return _rejection(f"metadata: {_NOT_OBJECT}", field="metadata")  # pydantic (model type)
    user_id = metadata.get("user_id")
    if user_id is not None and type(user_id) is not str:
        return _rejection("metadata.user_id: Input should be a valid string", field="metadata.user_id")
    return None


def _stop_sequences_field(stops: Any, body: dict[str, Any]) -> Rejection | None:
    """``stop_sequences`` is a list of strings: "stop_sequences.0: Input should be a valid string" (pydantic)."""
    if type(stops) is not list:
        return _rejection("stop_sequences: Input should be a valid list", field="stop_sequences")
    for k, stop in enumerate(stops):
        if type(stop) is not str:
            return _rejection(f"stop_sequences.{k}: Input should be a valid string", field=f"stop_sequences[{k}]")
    return None


def _cache_control_field(cache_control: Any, body: dict[str, Any]) -> Rejection | None:
    """The automatic ``cache_control`` is an ephemeral one: "cache_control: Input tag 'x' found using 'type' does
    not match any of the expected tags: 'ephemeral'" (pydantic, tagged union)."""
    _check_cache_control(cache_control, "cache_control", "cache_control")
    return None


#: The optional top-level fields' rules, in the order the API reports them (as jsonschema's keywords: each field's
#: rule runs when the body sets it).
FIELD_RULES: tuple[tuple[str, Callable[[Any, dict[str, Any]], Rejection | None]], ...] = (
    ("system", _system_field),
    ("tool_choice", _tool_choice_field),
    ("metadata", _metadata_field),
    ("stop_sequences", _stop_sequences_field),
    ("cache_control", _cache_control_field),
)


def _messages_shape(r: _Request) -> Rejection | None:
    """Every message's shape, in order, the first schema error raised at once in pydantic's wording
    ("messages.1.role: Input should be 'user', 'assistant' or 'system'", "messages.0.content.1.tool_use.id: String
    should match pattern '^[a-zA-Z0-9_-]+$'", "messages.0.content.0: Input tag 'x' found using 'type' does not match
    any of the expected tags: ...").  The one walk over the messages: it also keeps, for the rules after it, the
    turns and the first offence of each of their kinds (`_Walk`); a conversation's next request resumes it."""
    messages: list[Any] = r.body["messages"]
    memo = r.memo
    count = len(messages)
    walk, start, keep_at, resume = _resumed_walk(messages, r.signed_by_sim, memo)
    final, signed = count - 1, r.signed_by_sim
    for i in range(start, count):
        if i == keep_at and memo is not None:
            memo._resume = (i, _sent_copy(messages, i, start, resume, memo.read_only), walk.copy())
        _walk_message(walk, messages[i], i, i == final, signed)
    if keep_at == count and memo is not None:
        # Nothing changes the walk after its last message (the rules read the open turn as it is): no copy.
        memo._resume = (count, _sent_copy(messages, count, start, resume, memo.read_only), walk)
    r.walk = walk
    return None


def _thinking_setting(r: _Request) -> Rejection | None:
    """``thinking`` is one of its tagged kinds with a budget of at least 1,024 below ``max_tokens``:
    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024", "`max_tokens` must be greater
    than `thinking.budget_tokens`." (real)."""
    thinking = r.body.get("thinking")
    if thinking is not None:
        r.thinking_type = _check_thinking_config(thinking, r.body["max_tokens"] if r.needs_max_tokens else None)
    return None


def _tool_definitions(r: _Request) -> Rejection | None:
    """Each tool's shape: "tools.0.custom.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'",
    "tools.0.custom.input_schema.type: Input should be 'object'" (real).  Keeps `_unique_tool_names`' finding."""
    tools, memo = r.body.get("tools"), r.memo
    known = memo._tools if memo is not None else None
    if known is not None and known[0] == tools:  # equal tools pass the same checks
        r.tool_names_error = known[1]
    else:
        r.tool_names_error = _check_tools(tools)
        if memo is not None:
            memo._tools = (tools if memo.read_only else _copy_json(tools), r.tool_names_error)
    return None


def _at_least_one_message(r: _Request) -> Rejection | None:
    """`_MSG_AT_LEAST_ONE`: "messages: at least one message is required"."""
    return None if r.body["messages"] else _rejection(_MSG_AT_LEAST_ONE, field="messages")


def _temperature_with_thinking(r: _Request) -> Rejection | None:
    """`_MSG_TEMPERATURE`: with thinking on, ``temperature`` is 1 or unset."""
    if r.thinking_type == "enabled" or r.thinking_type == "adaptive":
        temperature = r.body.get("temperature")
        if temperature is not None and temperature != 1:
            return _rejection(_MSG_TEMPERATURE, field="temperature")
    return None


def _unique_tool_names(r: _Request) -> Rejection | None:
    """`_MSG_UNIQUE_TOOL_NAMES`: "tools: Tool names must be unique." (found by `_tool_definitions`)."""
    return r.tool_names_error


def _content_and_ids(r: _Request) -> Rejection | None:
    """The first, in message order, of: a message with no content (`_MSG_EMPTY_CONTENT`), an empty text block
    (`_MSG_NONEMPTY_TEXT`), a message of nothing but whitespace text (`_MSG_WHITESPACE_TEXT`), a ``tool_use`` id
    seen before (`_MSG_UNIQUE_IDS`).  The optional final assistant message may be empty (a prefill)."""
    return r.walk.block_error


def _tool_pairing(r: _Request) -> Rejection | None:
    """Each ``tool_use`` answered at the start of the next user turn (`_MSG_MISSING_RESULT`), each ``tool_result``
    answering a ``tool_use`` of the turn before (`_MSG_STRAY_RESULT`), positions named after the API merges
    consecutive same-role messages.  A final assistant turn's unanswered calls (a prefill, a ``pause_turn``
    continuation) are accepted."""
    error = r.walk.last_pairing_error()
    return None if error is None else _at_merged_position(error, r.body["messages"])


def _server_tool_results(r: _Request) -> Rejection | None:
    """`_MSG_SERVER_UNANSWERED`: a ``server_tool_use`` left without its result.

    Accepted only where the real API takes it: in the final assistant turn (a ``pause_turn`` continuation: the
    API runs the call and its reply opens with the result), or in the assistant turn right before a final user
    turn of nothing but ``tool_result`` blocks (the call in flight beside client calls).  Anything after that is
    a 400 naming the call (pydantic-ai measured both shapes on claude-sonnet-4-5: ``test_unpaired_native_tool_calls``,
    whose in-flight request is recorded as accepted).  ``mcp_tool_use`` is not checked (no exact text).
    """
    scan = _server_scan(r)
    return _unanswered_server_use(r.body["messages"], scan.unanswered) if scan.unanswered else None


def _cache_breakpoints(r: _Request) -> Rejection | None:
    """`_MSG_CACHE_BREAKPOINTS`: at most 4 ``cache_control`` breakpoints, counted as the API counts them: blocks
    with ``cache_control`` in ``system``, in ``tools``, in every message (blocks inside a ``tool_result`` too), and
    the top-level automatic ``cache_control``, which takes one of the four slots."""
    body = r.body
    count = _server_scan(r).breakpoints + (body.get("cache_control") is not None)
    for part in (body.get("system"), body.get("tools")):
        if type(part) is list:
            for b in part:
                if type(b) is dict and b.get("cache_control") is not None:
                    count += 1
    if count > _MAX_BREAKPOINTS:
        return _rejection(_MSG_CACHE_BREAKPOINTS.format(n=count), field="cache_control")
    return None


def _thinking_opens_the_tool_turn(r: _Request) -> Rejection | None:
    """`_MSG_THINKING_FIRST`: with thinking on, the assistant turn holding the lastmost ``tool_use`` opens with a
    thinking block."""
    if r.thinking_type != "enabled" and r.thinking_type != "adaptive":
        return None
    turns = r.walk.all_turns()
    start = 0
    for index in range(len(turns) - 1, -1, -1):
        role, _, _, results = turns[index]
        if role == "user" and not results:
            start = index + 1  # the last genuine user turn: the current assistant turn starts after it
            break
    current = turns[start:]
    if not current or current[0][0] != "assistant" or not any(turn[2] for turn in current):
        return None
    first = current[0][1]
    if first is None or first[2] in _THINKING_BLOCKS:
        return None
    i, j, found = first
    return _rejection(f"messages.{i}.content.{j}.type: " + _MSG_THINKING_FIRST.format(found=found), i, j)


def _no_thinking_in_final_message(r: _Request) -> Rejection | None:
    """`_MSG_THINKING_DISABLED`: with thinking off (not ``between_tools``), the final assistant message holds no
    thinking block."""
    walk = r.walk
    if (r.thinking_type is not None and r.thinking_type != "disabled") or walk.role is None:
        return None
    messages = r.body["messages"]
    role, first = walk.role, walk.first  # the final turn's
    if messages[-1].get("role") != "assistant" or role != "assistant" or first is None:
        return None
    for i in range(first[0], len(messages)):
        message = messages[i]
        content = message.get("content")
        if message.get("role") == "assistant" and type(content) is list:
            for j, block in enumerate(content):
                if block.get("type") in _THINKING_BLOCKS:
                    return _rejection(f"messages.{i}.content.{j}: {_MSG_THINKING_DISABLED}", i, j)
    return None


def _thinking_signatures(r: _Request) -> Rejection | None:
    """`_MSG_BAD_SIGNATURE`: with ``signed_by_sim``, every thinking block carries `thinking_signature` of its text
    (the simulator wrote every assistant turn: an edited or made-up thinking block is caught as the API does)."""
    return r.walk.signature_error


#: The rules in the order the real API reports them: the schema layer (raised at once), then the request's rules.
RULES: tuple[Callable[[_Request], Rejection | None], ...] = (
    _body_is_an_object,
    _required_fields,
    _field_types,
    _max_tokens_at_least_one,
    _optional_fields,
    _messages_shape,
    _thinking_setting,
    _tool_definitions,
    _at_least_one_message,
    _temperature_with_thinking,
    _unique_tool_names,
    _content_and_ids,
    _tool_pairing,
    _server_tool_results,
    _cache_breakpoints,
    _thinking_opens_the_tool_turn,
    _no_thinking_in_final_message,
    _thinking_signatures,
)


# --------------------------------------------------------------------------- the walk over the messages


def _resumed_walk(
    messages: list[Any], signed_by_sim: bool, memo: ConversationValidator | None
) -> tuple[_Walk, int, int, tuple[int, list[Any], _Walk] | None]:
    """Where a request's walk starts: (the walk so far, the message it goes on from, where to keep a walk for the
    next request (-1: nowhere), what the conversation had kept).  A kept walk is taken up when the request's
    messages start with messages equal to those it was taken after."""
    if memo is None or memo.signed_by_sim != signed_by_sim:
        return _Walk(), 0, -1, None
    count = len(messages)
    final = messages[count - 1] if count else None
    # Only a final assistant message is walked differently for being last (prefill rules).
    keep_at = count if type(final) is dict and final.get("role") in ("user", "system") else count - 1
    resume = memo._resume
    if resume is not None:
        at, before, walk = resume
        # Equal messages walk to the same state; equal to the copy, so an in-place edit is seen.
        # (A walk kept before an assistant message at `at` needs messages after it: at < count.)
        if at < count and messages[:at] == before:  # before: the copy kept of what was sent
            memo._resume = None  # this walk changes the kept one: it leaves a new one instead
            return walk, at, keep_at, resume
    return _Walk(), 0, keep_at, resume


def _walk_message(walk: _Walk, message: Any, i: int, final: bool, signed: bool) -> None:
    """One message: its role and content (raising the first schema error), the turns it opens or extends."""
    if type(message) is not dict:
        raise _fail(f"messages.{i}: {_NOT_OBJECT}", i)
    role = message.get("role")
    if role is None:
        raise _fail(f"messages.{i}.role: Field required", i, field="role")
    if role != "user" and role != "assistant":
        if role != "system":
            raise _fail(f"messages.{i}.role: Input should be 'user', 'assistant' or 'system'", i, field="role")
        # System messages (SDK 1.x+) sit outside the user/assistant turn structure:
        # they neither merge with nor separate the turns around them.
        _check_system_message(message, i)
        return
    content = message.get("content")
    if content is None:
        raise _fail(f"messages.{i}.content: Field required", i, field="content")
    if role != walk.role:  # close the open turn, pairing a user turn's tool_results with the calls before it
        if walk.role == "user":
            if walk.pairing_error is None and (walk.prev_uses or walk.results):
                walk.pairing_error = _check_pair(walk.prev_uses, walk.results)
            walk.prev_uses = _NO_USES
        elif walk.role is not None:
            walk.prev_uses = walk.uses
        if walk.role is not None:
            walk.turns.append((walk.role, walk.first, walk.uses, walk.results))
        walk.role, walk.first, walk.uses, walk.results, walk.prefix_open = role, None, [], [], True
    may_be_empty = final and role == "assistant"  # the optional final assistant message (a prefill)
    if type(content) is str:
        if walk.block_error is None and not may_be_empty and (not content or content.isspace()):
            walk.block_error = _empty_content(i) if not content else _rejection(_MSG_WHITESPACE_TEXT, i, 0)
        if walk.first is None:
            walk.first = (i, 0, "text")
        walk.prefix_open = False
    elif type(content) is not list:
        raise _fail(f"messages.{i}.content: Input should be a valid string or a list of content blocks", i)
    elif not content:
        if walk.block_error is None and not may_be_empty:
            walk.block_error = _empty_content(i)
    else:
        _walk_blocks(walk, content, i, may_be_empty, signed)


def _walk_blocks(walk: _Walk, content: list[Any], i: int, may_be_empty: bool, signed: bool) -> None:
    """A message's content blocks, each checked by the rule for its type (`_BLOCK_RULES`)."""
    if walk.first is None:
        head = content[0]
        walk.first = (i, 0, head.get("type") if type(head) is dict else None)
    leading = walk.prefix_open  # still inside the turn's leading run of tool_result blocks
    blank_text: int | None = None  # first whitespace-only text block of this message
    substance = False  # anything in this message besides whitespace-only text
    for j, block in enumerate(content):
        if type(block) is not dict:
            raise _fail(f"messages.{i}.content.{j}: {_NOT_OBJECT}", i, j)
        btype = block.get("type")
        if "cache_control" in block or "citations" in block:
            _check_block_extras(block, btype, i, j)
        if btype == "tool_result":
            _tool_result_block(walk, block, i, j, leading)
            substance = True
            continue
        if btype == "text":
            text = block.get("text")
            if type(text) is not str or not text:
                _empty_text_block(walk, block, i, j)  # raises, or keeps `_MSG_NONEMPTY_TEXT`
            elif not text.isspace():
                substance = True
            elif blank_text is None:
                blank_text = j
            leading = False
            continue
        if btype is None:
            raise _fail(f"messages.{i}.content.{j}: {_NO_TAG}", i, j)
        substance = True
        leading = False  # any other block ends the leading run of tool_results
        rule = _BLOCK_RULES.get(btype) if type(btype) is str else None
        if rule is not None:
            rule(walk, block, i, j, signed)
        elif type(btype) is not str or (btype not in _BLOCK_TYPES and not _is_server_block(btype)):
            raise _fail(
                f"messages.{i}.content.{j}: Input tag '{btype}' found using 'type' does not match any of "
                f"the expected tags: {_BLOCK_TAGS}",
                i,
                j,
            )
    walk.prefix_open = leading
    # A whitespace-only text block next to other content passes (recorded: " " before
    # tool_use blocks, answered 200); a message of nothing but blank text does not.
    if blank_text is not None and not substance and walk.block_error is None and not may_be_empty:
        walk.block_error = _rejection(_MSG_WHITESPACE_TEXT, i, blank_text)


def _tool_result_block(walk: _Walk, block: dict[str, Any], i: int, j: int, leading: bool) -> None:
    """"messages.0.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'", and its
    content a string or a list of text, image, document, search result, ... blocks."""
    tool_use_id = block.get("tool_use_id")
    # An id already seen on a tool_use passed the pattern there: skip the regex.
    if type(tool_use_id) is not str or (tool_use_id not in walk.seen_ids and _ID_RE.fullmatch(tool_use_id) is None):
        raise _id_error(block, "tool_result", "tool_use_id", i, j)
    result_content = block.get("content")
    if type(result_content) is list:
        _check_tool_result_content(result_content, i, j)
    elif result_content is not None and type(result_content) is not str:
        # pydantic's wording for a `str | list[block]` field given neither (closest documented).
        raise _fail(f"messages.{i}.content.{j}.tool_result.content: Input should be a valid list", i, j)
    walk.results.append((i, j, tool_use_id, leading))


def _empty_text_block(walk: _Walk, block: dict[str, Any], i: int, j: int) -> None:
    """A text block without text: "messages.0.content.0.text.text: Field required", "messages.0.content.0.text:
    cache_control cannot be set for empty text blocks" (at once), else `_MSG_NONEMPTY_TEXT` (kept)."""
    if type(block.get("text")) is not str:
        raise _field_error(block, "text", "text", i, j)
    if block.get("cache_control") is not None:
        raise _fail(f"messages.{i}.content.{j}.text: cache_control cannot be set for empty text blocks", i, j)
    if walk.block_error is None:
        walk.block_error = _rejection(_MSG_NONEMPTY_TEXT, i, j)


def _tool_use_block(walk: _Walk, block: dict[str, Any], i: int, j: int, signed: bool) -> None:
    """An id matching ``^[a-zA-Z0-9_-]+$``, a string ``name`` and an object ``input`` (pydantic: "messages.1.content.0
    .tool_use.input: Input should be a valid dictionary"); an id seen before is `_MSG_UNIQUE_IDS`."""
    tool_use_id = block.get("id")
    if type(tool_use_id) is not str or _ID_RE.fullmatch(tool_use_id) is None:
        raise _id_error(block, "tool_use", "id", i, j)
    if type(block.get("name")) is not str:
        raise _field_error(block, "tool_use", "name", i, j)
    if type(block.get("input")) is not dict:
        raise _field_error(block, "tool_use", "input", i, j, "Input should be a valid dictionary")
    if tool_use_id in walk.seen_ids:
        if walk.block_error is None:
            walk.block_error = _rejection(_MSG_UNIQUE_IDS.format(i=i, j=j), i, j)
    else:
        walk.seen_ids.add(tool_use_id)
    walk.uses.append((i, j, tool_use_id))


def _thinking_block(walk: _Walk, block: dict[str, Any], i: int, j: int, signed: bool) -> None:
    """String ``thinking`` and ``signature`` ("messages.1.content.0.thinking.signature: Field required"); with
    ``signed``, the first signature that is not the simulator's is kept for `_thinking_signatures`."""
    thinking = block.get("thinking")
    if type(thinking) is not str:
        raise _field_error(block, "thinking", "thinking", i, j)
    signature = block.get("signature")
    if type(signature) is not str:
        raise _field_error(block, "thinking", "signature", i, j)
    if signed and walk.signature_error is None and signature != thinking_signature(thinking):
        walk.signature_error = _rejection(_MSG_BAD_SIGNATURE.format(i=i, j=j), i, j)


def _redacted_thinking_block(walk: _Walk, block: dict[str, Any], i: int, j: int, signed: bool) -> None:
    """A string ``data``: "messages.1.content.0.redacted_thinking.data: Field required"."""
    if type(block.get("data")) is not str:
        raise _field_error(block, "redacted_thinking", "data", i, j)


#: The block types with rules of their own beyond their tag (text and tool_result are walked inline).
_BLOCK_RULES: dict[str, Callable[[_Walk, dict[str, Any], int, int, bool], None]] = {
    "tool_use": _tool_use_block,
    "thinking": _thinking_block,
    "redacted_thinking": _redacted_thinking_block,
}


# --------------------------------------------------------------------------- the rules' helpers


def _check_system_block(block: Any, k: int) -> None:
    where = f"system.{k}"
    if type(block) is not dict:
        raise _fail(f"{where}: {_NOT_OBJECT}", field=f"system[{k}]")  # pydantic (model type)
    btype = block.get("type")
    if btype != "text":  # system blocks are text blocks only: a literal, not a tagged union (pydantic)
        problem = "Field required" if btype is None else "Input should be 'text'"
        raise _fail(f"{where}.type: {problem}", field=f"system[{k}].type")
    text = block.get("text")
    if type(text) is not str:
        problem = "Field required" if text is None else "Input should be a valid string"
        raise _fail(f"{where}.text: {problem}", field=f"system[{k}].text")
    if "cache_control" in block:
        _check_cache_control(block["cache_control"], f"{where}.cache_control", f"system[{k}].cache_control")


def _check_tool_choice(choice: Any, tools: Any) -> None:
    if type(choice) is not dict:  # a bare string such as "auto" (pydantic, tagged union)
        raise _fail(f"tool_choice: {_NOT_OBJECT}", field="tool_choice")
    ctype = choice.get("type")
    if ctype is None:
        raise _fail(f"tool_choice: {_NO_TAG}", field="tool_choice")  # pydantic
    if type(ctype) is not str or ctype not in _TOOL_CHOICE_TYPES:
        raise _fail(  # pydantic, the same wording the API uses for block tags (real, wire.md)
            f"tool_choice: Input tag '{ctype}' found using 'type' does not match any of the expected tags: "
            f"{_TOOL_CHOICE_TAGS}",
            field="tool_choice",
        )
    if ctype != "tool":
        return
    name = choice.get("name")
    if type(name) is not str:
        problem = "Field required" if name is None else "Input should be a valid string"
        raise _fail(f"tool_choice.tool.name: {problem}", field="tool_choice.name")  # pydantic
    listed = tools if type(tools) is list else []
    names = {t.get("name") for t in listed if type(t) is dict}
    # A toolset (MCP, browser...) brings tools by name the request does not list: nothing to check against.
    opaque = any(type(t) is not dict or type(t.get("name")) is not str for t in listed)
    if name not in names and not opaque:
        # real: "Tool 'web_search' not found in provided tools" (an API 400 body quoted in proxies' tests)
        raise _fail(f"Tool '{name}' not found in provided tools", field="tool_choice.name")


def _check_cache_control(value: Any, where: str, field: str) -> None:
    if value is None:
        return
    if type(value) is not dict:
        raise _fail(f"{where}: {_NOT_OBJECT}", field=field)  # pydantic (tagged union)
    ctype = value.get("type")
    if ctype is None:
        raise _fail(f"{where}: {_NO_TAG}", field=field)
    if ctype != "ephemeral":
        raise _fail(
            f"{where}: Input tag '{ctype}' found using 'type' does not match any of the expected tags: {_CACHE_TAGS}",
            field=field,
        )


def _check_block_extras(block: dict[str, Any], btype: Any, i: int, j: int) -> None:
    """``cache_control`` on any block, ``citations`` on text and document blocks: their shapes (pydantic)."""
    tag = btype if type(btype) is str else "block"
    if "cache_control" in block:
        _check_cache_control(block["cache_control"], f"messages.{i}.content.{j}.{tag}.cache_control", "cache_control")
    citations = block.get("citations")
    if citations is None:
        return
    if btype == "text" and type(citations) is not list:
        raise _fail(f"messages.{i}.content.{j}.text.citations: Input should be a valid list", i, j, "citations")
    if btype == "document" and type(citations) is not dict:
        raise _fail(f"messages.{i}.content.{j}.document.citations: {_NOT_OBJECT}", i, j, "citations")


_POSITION = re.compile(r"messages\[(\d+)\](?:\.content\[(\d+)\])?")


def _at_merged_position(rejection: Rejection, messages: list[Any]) -> Rejection:
    """The pairing rules run after the API merges consecutive same-role messages: name that position.

    ``[user "a", user tool_result]`` is one user turn to the API, so its tool_result is at
    ``messages.0.content.1``, not ``messages.1.content.0``.  The ``path`` keeps the position in the
    request as sent (for reports); only the message's prefix changes.
    """
    found = _POSITION.fullmatch(rejection.path or "")
    if found is None:
        return rejection
    i = int(found.group(1))
    j = int(found.group(2)) if found.group(2) is not None else None
    merged, offset, role = -1, 0, None
    for k in range(i + 1):
        message = messages[k]
        kind = message.get("role")
        content = message.get("content")
        size = 1 if type(content) is str else len(content) if type(content) is list else 0
        if kind == "system" or kind != role:  # a system message is its own entry and merges with nothing
            merged, offset = merged + 1, 0
            role = kind if kind != "system" else role
        if k < i:
            offset += size
    if merged == i and offset == 0:
        return rejection
    text = rejection.message
    if j is not None and text.startswith(f"messages.{i}.content.{j}:"):
        old, new = f"messages.{i}.content.{j}", f"messages.{merged}.content.{offset + j}"
    elif text.startswith(f"messages.{i}:"):
        old, new = f"messages.{i}", f"messages.{merged}"
    else:
        return rejection
    return Rejection(rejection.status, rejection.type, new + text[len(old) :], rejection.details, rejection.path)


def _copy_json(value: Any) -> Any:
    """A deep copy of parsed JSON (dicts and lists copied, the immutable leaves shared)."""
    if type(value) is dict:
        return {k: _copy_json(v) for k, v in value.items()}
    if type(value) is list:
        return [_copy_json(v) for v in value]
    return value


def _sent_copy(messages: list[Any], upto: int, start: int, resume: Any, read_only: bool = False) -> list[Any]:
    """A copy of ``messages[:upto]`` as sent: the previous copy's first ``start`` (proven equal), the rest new.

    ``read_only``: the messages are never changed after they are sent: the same objects are kept.
    """
    if read_only:
        return messages[:upto]
    kept: list[Any] = resume[1][:start] if start and resume is not None else []
    return kept + [_copy_json(m) for m in messages[len(kept) : upto]]


class _ServerToolScan:
    """What `_check_server_tools_and_breakpoints` knows of ``messages[:at]``: kept between requests.

    ``breakpoints``: blocks with ``cache_control`` in those messages; ``unanswered``: their
    ``server_tool_use`` blocks with no result block after them, by id -> (message, block, name).
    """

    __slots__ = ("at", "breakpoints", "messages", "unanswered")

    def __init__(self, at: int, messages: list[Any], breakpoints: int, unanswered: dict[str, tuple[int, int, str]]):
        self.at = at
        self.messages = messages
        self.breakpoints = breakpoints
        self.unanswered = unanswered


def _scan_server_tools(messages: list[Any], scan: _ServerToolScan) -> None:
    """Walk ``messages[scan.at:]`` into ``scan`` (the messages already passed the schema checks)."""
    breakpoints, unanswered = scan.breakpoints, scan.unanswered
    for i in range(scan.at, len(messages)):
        content = messages[i].get("content")
        if type(content) is not list:
            continue
        for j, block in enumerate(content):
            if type(block) is not dict:  # (a system message's blocks are not checked by the walk)
                continue
            if block.get("cache_control") is not None:
                breakpoints += 1
            btype = block.get("type")
            if btype == "tool_result":
                inner = block.get("content")
                if type(inner) is list:
                    breakpoints += sum(1 for b in inner if type(b) is dict and b.get("cache_control") is not None)
            elif btype == "server_tool_use":
                use_id = block.get("id")
                if type(use_id) is str:
                    unanswered[use_id] = (i, j, str(block.get("name")))
            elif unanswered and type(btype) is str and btype.endswith("_tool_result"):
                answered = block.get("tool_use_id")
                if type(answered) is str:  # (any other id answers no call: a list or an object is no dict key)
                    unanswered.pop(answered, None)
    scan.at, scan.messages, scan.breakpoints = len(messages), messages, breakpoints



def _server_scan(r: _Request) -> _ServerToolScan:
    """The request's server calls and breakpoints (`_ServerToolScan`), walked once for both rules; a conversation's
    next request walks only the messages it added."""
    scan = r.scan
    if scan is not None:
        return scan
    messages: list[Any] = r.body["messages"]
    memo = r.memo
    scan = memo._servertools if memo is not None else None
    if scan is None or scan.at > len(messages) or messages[: scan.at] != (
        scan.messages if len(scan.messages) == scan.at else scan.messages[: scan.at]
    ):
        scan = _ServerToolScan(0, messages, 0, {})
    _scan_server_tools(messages, scan)  # what this request added to the last one's messages (all of a new one)
    if memo is not None:
        memo._servertools = scan
    r.scan = scan
    return scan


def _unanswered_server_use(messages: list[Any], unanswered: dict[str, tuple[int, int, str]]) -> Rejection | None:
    """The rejection for the first server call left unanswered where the API does not take it, if any."""
    # The final turn (user or assistant; system messages stand apart) and the turn before it.
    end = len(messages)
    k = end - 1
    while k >= 0 and messages[k].get("role") == "system":
        k -= 1
    if k < 0:
        return None
    final_role = messages[k].get("role")
    final_start = k
    while final_start > 0 and messages[final_start - 1].get("role") in (final_role, "system"):
        final_start -= 1
    in_flight_from = end  # where an assistant turn may hold calls in flight: only before an all-results user turn
    if final_role == "user" and all(
        message.get("role") == "system"
        or (type(message.get("content")) is list and all(b.get("type") == "tool_result" for b in message["content"]))
        for message in messages[final_start:]
    ):
        before = final_start
        while before > 0 and messages[before - 1].get("role") in ("assistant", "system"):
            before -= 1
        in_flight_from = before
    for i, j, name in sorted(unanswered.values()):
        if final_role == "assistant" and i >= final_start:
            continue  # the paused turn sent back to be continued
        if in_flight_from <= i < final_start:
            continue  # in flight beside client calls answered by the final user turn
        use_id = messages[i]["content"][j].get("id")
        return _rejection(_MSG_SERVER_UNANSWERED.format(i=i, name=name, id=use_id), i, j)
    return None


def _is_server_block(btype: Any) -> bool:
    return type(btype) is str and btype.endswith(("_tool_result", "_tool_use"))


def _empty_content(i: int) -> Rejection:
    return _rejection(_MSG_EMPTY_CONTENT.format(i=i), i)


def _check_system_message(message: dict[str, Any], i: int) -> None:
    content = message.get("content")
    if content is None:
        raise _fail(f"messages.{i}.content: Field required", i, field="content")
    if type(content) is not str and type(content) is not list:
        raise _fail(f"messages.{i}.content: Input should be a valid string or a list of content blocks", i)


def _check_tool_result_content(content: list[Any], i: int, j: int) -> None:
    for k, item in enumerate(content):
        itype = item.get("type") if type(item) is dict else None
        if type(itype) is not str or itype not in _TOOL_RESULT_CONTENT_TYPES:
            where = f"messages.{i}.content.{j}.tool_result.content.{k}"
            if type(item) is not dict:
                problem = _NOT_OBJECT
            elif itype is None:
                problem = _NO_TAG
            else:
                problem = f"Input tag '{itype}' found using 'type' does not match any of the expected tags: "
                problem += _TOOL_RESULT_CONTENT_TAGS
            raise _fail(f"{where}: {problem}", i, j, f"content[{k}]")


def _check_thinking_config(thinking: Any, max_tokens: Any) -> str | None:
    """Validate ``thinking``; return its type (None when absent).  Raises on schema errors."""
    if thinking is None:
        return None
    if type(thinking) is not dict:
        raise _fail(f"thinking: {_NOT_OBJECT}", field="thinking")
    ttype = thinking.get("type")
    if ttype is None:
        raise _fail(f"thinking: {_NO_TAG}", field="thinking")
    if ttype not in _THINKING_TYPES:
        raise _fail(
            f"thinking: Input tag '{ttype}' found using 'type' does not match any of the expected tags: {_THINKING_TAGS}",
            field="thinking",
        )
    if ttype == "enabled":
        budget = thinking.get("budget_tokens")
        if budget is None:
            raise _fail("thinking.enabled.budget_tokens: Field required", field="thinking.budget_tokens")
        if not _is_int(budget):
            raise _fail(
                "thinking.enabled.budget_tokens: Input should be a valid integer", field="thinking.budget_tokens"
            )
        if budget < 1024:
            raise _fail(
                "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                field="thinking.budget_tokens",
            )
        if max_tokens is not None and budget >= max_tokens:
            raise _fail("`max_tokens` must be greater than `thinking.budget_tokens`.", field="thinking.budget_tokens")
    return str(ttype)


def _check_tools(tools: Any) -> Rejection | None:
    """Raise on tool schema errors; return the (later-ranked) duplicate-name rejection, if any."""
    if tools is None:
        return None
    if type(tools) is not list:
        raise _fail("tools: Input should be a valid list", field="tools")
    names: set[str] = set()
    duplicate = False
    for k, tool in enumerate(tools):
        if type(tool) is not dict:
            raise _fail(f"tools.{k}: {_NOT_OBJECT}", field=f"tools[{k}]")
        ttype = tool.get("type")
        name = tool.get("name")
        if ttype is not None and type(ttype) is not str:
            # The tools union is tagged by `type`; a non-string tag (closest documented wording, pydantic's).
            raise _fail(f"tools.{k}.type: Input should be a valid string", field=f"tools[{k}].type")
        if "cache_control" in tool:
            _check_cache_control(tool["cache_control"], f"tools.{k}.cache_control", f"tools[{k}].cache_control")
        if (ttype is None or ttype == "custom") and not _valid_custom_tool(tool):
            raise _custom_tool_error(tool, k)
        # Server tools (any other ``type``) are Anthropic's to define: they pass.
        if type(name) is str:
            if name in names:
                duplicate = True
            names.add(name)
    return _rejection("tools: Tool names must be unique.", field="tools") if duplicate else None


def _valid_custom_tool(tool: dict[str, Any]) -> bool:
    name = tool.get("name")
    schema = tool.get("input_schema")
    return (
        type(name) is str
        and _TOOL_NAME_RE.fullmatch(name) is not None
        and type(schema) is dict
        and schema.get("type") == "object"
    )


def _custom_tool_error(tool: dict[str, Any], k: int) -> _Reject:
    where = f"tools.{k}.custom"
    name = tool.get("name")
    schema = tool.get("input_schema")
    if name is None:
        return _fail(f"{where}.name: Field required", field=f"tools[{k}].name")
    if type(name) is not str:
        return _fail(f"{where}.name: Input should be a valid string", field=f"tools[{k}].name")
    if _TOOL_NAME_RE.fullmatch(name) is None:
        return _fail(f"{where}.name: String should match pattern '{_TOOL_NAME_PATTERN}'", field=f"tools[{k}].name")
    if schema is None:
        return _fail(f"{where}.input_schema: Field required", field=f"tools[{k}].input_schema")
    if type(schema) is not dict:
        return _fail(f"{where}.input_schema: Input should be a valid dictionary", field=f"tools[{k}].input_schema")
    if schema.get("type") is None:
        return _fail(f"{where}.input_schema.type: Field required", field=f"tools[{k}].input_schema.type")
    return _fail(f"{where}.input_schema.type: Input should be 'object'", field=f"tools[{k}].input_schema.type")


def _check_pair(uses: _Uses, results: _Results) -> Rejection | None:
    """Each tool_use of the assistant turn answered at the start of the next user turn; no stray tool_result."""
    # The common case inline and cheap: one call, answered first in the next turn.
    if len(uses) == 1 == len(results) and uses[0][2] == results[0][2] and results[0][3]:
        return None
    if _answered_in_order(uses, results):
        return None
    return _pairing_error(uses, results)


def _answered_in_order(uses: _Uses, results: _Results) -> bool:
    # The common case, checked cheaply: one leading result per call, in the calls' order.
    if len(uses) != len(results):
        return False
    for use, result in zip(uses, results, strict=True):
        if use[2] != result[2] or not result[3]:
            return False
    return True


def _pairing_error(uses: _Uses, results: _Results) -> Rejection | None:
    asked = {use[2] for use in uses}
    stray = [result for result in results if result[2] not in asked]
    if stray:
        i, j = stray[0][0], stray[0][1]
        ids = ", ".join(dict.fromkeys(result[2] for result in stray))
        return _rejection(_MSG_STRAY_RESULT.format(i=i, j=j, ids=ids), i, j)
    answered = {result[2] for result in results if result[3]}
    missing = [use for use in uses if use[2] not in answered]
    if missing:
        i, j = missing[0][0], missing[0][1]
        ids = ", ".join(dict.fromkeys(use[2] for use in missing))
        return _rejection(_MSG_MISSING_RESULT.format(i=i, ids=ids), i, j)
    return None  # answered out of order, or more than once: accepted

