// A small agent loop in TypeScript on the official `openai` package (Chat Completions), verified by
//   simloop verify --command "node openai_agent.js"
// (compiled with tsc). `new OpenAI()` finds the simulated API in OPENAI_BASE_URL and OPENAI_API_KEY; the
// tools, the task and the declared limits come from SIMLOOP_TOOLS, SIMLOOP_TASK and SIMLOOP_LIMITS, and each
// tool runs at POST $SIMLOOP_TOOLS_URL/NAME. The loop prints how it stopped as its last line: {"reason", "text"}.
//
// `--answer-first-only` is its one-bug twin: of a reply's parallel tool calls it answers only the first, so
// the real API refuses the next request with a 400 (the pairing invariant catches it).
import OpenAI from "openai";

type ToolAnswer = { content: string; is_error: boolean };
type SimloopTool = { name: string; description?: string; input_schema: Record<string, unknown> };

const answerFirstOnly = process.argv.includes("--answer-first-only");
const client = new OpenAI();
const tools: OpenAI.Chat.ChatCompletionTool[] = (JSON.parse(process.env.SIMLOOP_TOOLS ?? "[]") as SimloopTool[]).map(
  (tool) => ({
    type: "function",
    function: { name: tool.name, description: tool.description ?? "", parameters: tool.input_schema },
  }),
);
const limits: { max_steps?: number } = JSON.parse(process.env.SIMLOOP_LIMITS ?? "{}");
const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: "user", content: process.env.SIMLOOP_TASK ?? "" }];

function stop(reason: string, text = ""): void {
  console.log(JSON.stringify({ reason, text }));
}

// A failure is told to the model in the text: a tool message has no is_error.
async function runTool(name: string, args: unknown, callId: string): Promise<string> {
  const response = await fetch(`${process.env.SIMLOOP_TOOLS_URL}/${encodeURIComponent(name)}`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-simloop-tool-use-id": callId },
    body: JSON.stringify(args),
  });
  const answer = (await response.json()) as ToolAnswer;
  return answer.is_error ? `Error: ${answer.content}` : answer.content;
}

async function main(): Promise<void> {
  for (let step = 0; step < (limits.max_steps ?? 10); step++) {
    let reply: OpenAI.Chat.ChatCompletion;
    try {
      reply = await client.chat.completions.create({ model: "gpt-4o", messages, tools });
    } catch (error) {
      return stop("error", String(error)); // the SDK's retries gave up
    }
    const choice = reply.choices[0];
    messages.push(choice.message);
    switch (choice.finish_reason) {
      case "length":
        return stop("truncated", choice.message.content ?? ""); // a cut call's arguments may be partial: run none
      case "content_filter":
        return stop("refusal", choice.message.refusal ?? choice.message.content ?? "");
      case "tool_calls":
        break;
      default:
        return choice.message.refusal
          ? stop("refusal", choice.message.refusal)
          : stop("final", choice.message.content ?? "");
    }
    const calls = (choice.message.tool_calls ?? []).filter((call) => call.type === "function");
    for (const call of answerFirstOnly ? calls.slice(0, 1) : calls) {
      const content = await runTool(call.function.name, JSON.parse(call.function.arguments || "{}"), call.id);
      messages.push({ role: "tool", tool_call_id: call.id, content });
    }
  }
  stop("max_steps");
}

await main();
