"""Recorded HTTP traffic (VCR.py cassettes): read, record, replay as a model, convert, fuzz.

Users want regression tests from real runs without paying for the API on every CI run, and want to
know what their loop would have done had call 3 of that run failed.  This module is that bridge:

* **read** (`load_cassette`): both dialects found in the wild.  vcrpy's own (``request.body`` a
  string, ``response.body.string`` a string or ``!!binary`` bytes, gzip when the response says
  ``content-encoding: gzip``) and pydantic-ai's (JSON bodies stored as YAML under ``parsed_body``;
  streams stay raw SSE text).  Files are read with PyYAML's safe loader (vcrpy's fails on
  ``parsed_body``); a whole gzip-compressed file (``.yaml.gz``) is read too, and so is the layout
  vcrpy holds in memory (parallel ``requests``/``responses`` lists: langchain's ``*.yaml.gz``).  A
  call whose URI the recorder redacted is recognised by its body and response.  Everything is
  normalised: header names lower-cased, bodies as bytes (``parsed_body`` re-serialised as compact
  JSON, gzip decompressed), the then-stale ``content-length``/``content-encoding`` dropped.
* **record** (`record`, `vcr_config`, `configure_vcr`, `cassette_path`): vcrpy (>= 9.4, the first
  that sees httpx2) underneath, writing pytest-recording's layout (``cassettes/{module}/{test}.yaml``).
  JSON bodies are stored parsed (``parsed_body``) when that re-serialises to the exact bytes sent,
  SSE streams as their exact text, and secrets never reach the disk (`Scrubber`: URI, headers and
  bodies, every encoding): the same scrubbing hooks run at record and at replay, as vcrpy needs
  (research ``libs.md`` §2.4).
* **replay as a model** (`Recorded`): a cassette answers the simulated API's model requests in
  order; a request that differs from the recorded one fails with a readable JSON diff naming the
  call, the message and the block (`RecordingDiverged`), or, tolerant, is served by position and
  the drift collected.
* **convert** (`to_scenario`, `convert`): a recording as a v1 scenario, so a real run becomes an
  editable, reviewable test; `convert` refuses a cassette with no reply to script (`unconvertible` says why).

Every part reads the three wires: the Messages API, and OpenAI's Chat Completions and Responses (``_openai``: each
recorded request as the Messages request it stands for, ``previous_response_id`` chains rebuilt from the responses
recorded before them, each answer, JSON or SSE, as a `Turn` the simulator renders on the wire the loop calls).
* **fuzz** (`fault_plans`, `FaultedRecording`): keep the recorded replies and let Hypothesis inject
  API errors, tool faults, latencies and cut-offs; a failure shrinks to "the recording plus these
  faults".

The package holds one module per job: ``_read`` (layouts -> `Interaction`), ``_scrub`` and
``_record`` (recording), ``_convert`` (calls and scenarios), ``_openai`` (the OpenAI wires' calls), ``_replay`` (`Recorded`, drift) and
``_faults`` (fuzzing).  Import the names from ``simloop.cassettes``; the modules are private.

Why not vcrpy for replay: it matches whole requests (a changed loop gives "no match"), buffers SSE
into one chunk, and the SDK turns its misses into retried ``APIConnectionError``s.  Replay through
the simulator keeps virtual time, chunked streams, the request validator and the invariants.
"""

from __future__ import annotations

from simloop.cassettes._convert import (
    RecordedCall,
    Recording,
    convert,
    guess_kind,
    load_recording,
    reply_of_turn,
    to_scenario,
    unconvertible,
)
from simloop.cassettes._convert import (
    Source as Source,  # the type of a recording's source, kept importable
)
from simloop.cassettes._faults import Draw as Draw
from simloop.cassettes._faults import FaultedRecording, FaultPlan, fault_plans
from simloop.cassettes._read import CassetteError, Interaction, RecordedRequest, RecordedResponse, load_cassette
from simloop.cassettes._record import (
    MATCH_ON,
    RECORD_MODES,
    CassetteSerializer,
    cassette_path,
    configure_vcr,
    record,
    vcr_config,
)
from simloop.cassettes._replay import (
    TRANSPORT_FIELDS,
    Drift,
    Recorded,
    RecordingDiverged,
    RecordingExhausted,
    request_diff,
)
from simloop.cassettes._scrub import SECRET_REQUEST_HEADERS as SECRET_REQUEST_HEADERS
from simloop.cassettes._scrub import SECRET_RESPONSE_HEADERS as SECRET_RESPONSE_HEADERS
from simloop.cassettes._scrub import Scrubber

__all__ = [
    "MATCH_ON",
    "RECORD_MODES",
    "TRANSPORT_FIELDS",
    "CassetteError",
    "CassetteSerializer",
    "Drift",
    "FaultPlan",
    "FaultedRecording",
    "Interaction",
    "Recorded",
    "RecordedCall",
    "RecordedRequest",
    "RecordedResponse",
    "Recording",
    "RecordingDiverged",
    "RecordingExhausted",
    "Scrubber",
    "cassette_path",
    "configure_vcr",
    "convert",
    "fault_plans",
    "guess_kind",
    "load_cassette",
    "load_recording",
    "record",
    "reply_of_turn",
    "request_diff",
    "to_scenario",
    "unconvertible",
    "vcr_config",
]
