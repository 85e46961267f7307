#!/usr/bin/env bash
# A small agent loop in bash, curl and jq, verified by
#   simloop verify --command "bash agent.sh"
# It speaks the Messages API over HTTP itself: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, the tools,
# task and limits from SIMLOOP_TOOLS, SIMLOOP_TASK and SIMLOOP_LIMITS; its tools are MCP tools: a
# JSON-RPC tools/call to $SIMLOOP_MCP_URL (streamable HTTP, JSON answers), or POST $SIMLOOP_TOOLS_URL/NAME
# where simloop serves no MCP. A retry sends x-stainless-retry-count (as the SDKs do), so it counts as
# the same step; the server's retry-after-ms is 1 ms, so retries need no wait here. It prints how it
# stopped as its last line: {"reason": ..., "text": ...}.
#
# `--retry-forever` is its one-bug twin: it retries a failing API without a limit, so an outage makes it
# run away (the stops invariant catches it; simloop kills it at the runaway budget).
set -u
retry_forever=0
[ "${1:-}" = "--retry-forever" ] && retry_forever=1
max_steps=$(jq -r '.max_steps // 10' <<<"$SIMLOOP_LIMITS")
messages=$(jq -cn --arg task "$SIMLOOP_TASK" '[{role: "user", content: $task}]')
reply='' status=''

stop() {
  jq -cn --arg reason "$1" --arg text "${2:-}" '{reason: $reason, text: $text}'
  exit 0
}

run_tool() {  # NAME INPUT -> {"content": TEXT, "is_error": BOOL}
  if [ -n "${SIMLOOP_MCP_URL:-}" ]; then
    curl -sS -X POST "$SIMLOOP_MCP_URL" -H 'content-type: application/json' \
      -H 'accept: application/json, text/event-stream' -H 'mcp-protocol-version: 2025-06-18' \
      --data-binary "$(jq -cn --arg name "$1" --argjson args "$2" \
        '{jsonrpc: "2.0", id: 1, method: "tools/call", params: {name: $name, arguments: $args}}')" |
      jq -c 'if .error then {content: .error.message, is_error: true}
             else {content: ([.result.content[]?.text] | join("")), is_error: (.result.isError // false)} end'
  else
    curl -sS -X POST "$SIMLOOP_TOOLS_URL/$1" -H 'content-type: application/json' --data-binary "$2"
  fi
}

call_api() {  # sets reply and status; fails when the API still fails after the retries
  local body out attempt=0
  body=$(jq -cn --argjson messages "$messages" --argjson tools "$SIMLOOP_TOOLS" \
    '{model: "claude-sonnet-5", max_tokens: 1024, messages: $messages, tools: $tools}')
  while :; do
    out=$(curl -sS -w '\n%{http_code}' -X POST "$ANTHROPIC_BASE_URL/v1/messages" \
      -H "x-api-key: $ANTHROPIC_API_KEY" -H "anthropic-version: 2023-06-01" \
      -H "content-type: application/json" -H "x-stainless-retry-count: $attempt" \
      --data-binary "$body" 2>/dev/null)
    status=${out##*$'\n'}
    reply=${out%$'\n'*}
    [ "$status" = 200 ] && return 0
    case "$status" in 408 | 429 | 5?? | 000 | '') ;; *) return 1 ;; esac  # 000: the connection dropped
    attempt=$((attempt + 1))
    [ "$retry_forever" = 1 ] || [ "$attempt" -le 2 ] || return 1
  done
}

for ((step = 0; step < max_steps; step++)); do
  call_api || stop error "the API failed with HTTP ${status:-000}"
  messages=$(jq -c --argjson m "$messages" '$m + [{role: "assistant", content: .content}]' <<<"$reply")
  text=$(jq -r '[.content[] | select(.type == "text") | .text] | join("")' <<<"$reply")
  case $(jq -r .stop_reason <<<"$reply") in
    end_turn | stop_sequence) stop final "$text" ;;
    refusal) stop refusal "$text" ;;
    max_tokens) stop truncated "$text" ;;
    pause_turn) continue ;;  # send the paused turn back as it is: the API continues it
  esac
  results='[]'
  while read -r block; do
    answer=$(run_tool "$(jq -r .name <<<"$block")" "$(jq -c .input <<<"$block")")
    results=$(jq -c --argjson r "$results" --arg id "$(jq -r .id <<<"$block")" \
      '$r + [{type: "tool_result", tool_use_id: $id, content: .content, is_error: .is_error}]' <<<"$answer")
  done < <(jq -c '.content[] | select(.type == "tool_use")' <<<"$reply")
  messages=$(jq -cn --argjson m "$messages" --argjson r "$results" '$m + [{role: "user", content: $r}]')
done
stop max_steps
