"""The three wires' protocol: what each accepts, what it refuses and with which text, how a reply is written.

The Messages API (`validate` its 400s and the context window, `render` Message JSON and SSE, `errors` the
error envelopes and headers, `servertools` the server tool blocks) and the two OpenAI wires (`openai_chat`
Chat Completions, `openai_responses` the Responses API, `openai_rules` the 400s they share), as pure
functions of JSON values.  The bottom of the package: nothing here imports anything else of simloop
(no run, no scenario, no transcript), so the models, the invariants and the cassettes read it, and the
server (`simloop.wire`) stands on it (`tests/test_layout.py`).
"""
