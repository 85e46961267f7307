// A small agent loop in TypeScript on the official @anthropic-ai/sdk, verified by
//   simloop verify --command "node agent.js"
// (compiled with tsc). The SDK finds the simulated API in ANTHROPIC_BASE_URL; the tools, the task and
// the declared limits come from SIMLOOP_TOOLS, SIMLOOP_TASK and SIMLOOP_LIMITS, and each tool runs at
// POST $SIMLOOP_TOOLS_URL/NAME. The loop prints how it stopped as its last line: {"reason", "text"}.
//
// `--drop-tool-errors` is its one-bug twin: a failed tool's result is sent without is_error, so the
// model takes the error text for a success (the tool_errors invariant catches it).
import Anthropic from "@anthropic-ai/sdk";

type ToolAnswer = { content: string; is_error: boolean };

const dropToolErrors = process.argv.includes("--drop-tool-errors");
const client = new Anthropic();
const tools: Anthropic.Tool[] = JSON.parse(process.env.SIMLOOP_TOOLS ?? "[]");
const limits: { max_steps?: number } = JSON.parse(process.env.SIMLOOP_LIMITS ?? "{}");
const messages: Anthropic.MessageParam[] = [{ role: "user", content: process.env.SIMLOOP_TASK ?? "" }];

function stop(reason: string, text = ""): void {
  console.log(JSON.stringify({ reason, text }));
}

function textOf(message: Anthropic.Message): string {
  return message.content.map((block) => (block.type === "text" ? block.text : "")).join("");
}

async function runTool(name: string, input: unknown): Promise<ToolAnswer> {
  const response = await fetch(`${process.env.SIMLOOP_TOOLS_URL}/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(input),
  });
  return (await response.json()) as ToolAnswer;
}

async function main(): Promise<void> {
  for (let step = 0; step < (limits.max_steps ?? 10); step++) {
    let reply: Anthropic.Message;
    try {
      reply = await client.messages.create({ model: "claude-sonnet-5", max_tokens: 1024, messages, tools });
    } catch (error) {
      return stop("error", String(error)); // the SDK's retries gave up
    }
    messages.push({ role: "assistant", content: reply.content });
    switch (reply.stop_reason) {
      case "end_turn":
      case "stop_sequence":
        return stop("final", textOf(reply));
      case "refusal":
        return stop("refusal", textOf(reply));
      case "max_tokens":
        return stop("truncated", textOf(reply));
      case "pause_turn":
        continue; // send the paused turn back as it is: the API continues it
    }
    const results: Anthropic.ToolResultBlockParam[] = [];
    for (const block of reply.content) {
      if (block.type !== "tool_use") continue;
      const answer = await runTool(block.name, block.input);
      results.push({
        type: "tool_result",
        tool_use_id: block.id,
        content: answer.content,
        ...(dropToolErrors ? {} : { is_error: answer.is_error }),
      });
    }
    messages.push({ role: "user", content: results });
  }
  stop("max_steps");
}

await main();
