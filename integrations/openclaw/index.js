// loopwatch for OpenClaw: before every tool call, ask a loopwatch gateway (POST /v1/decide);
// after it, report the result (POST /v1/events). A block or an abort refuses the call with the
// verdict's message; a warning lets it run. When the gateway is unreachable or slower than
// timeoutMs, the call runs (failOpen, the default) or is refused (failOpen: false).

const DEFAULTS = { gatewayUrl: "http://127.0.0.1:6070", timeoutMs: 200, failOpen: true };

export function settings(config) {
  const merged = { ...DEFAULTS, ...(config ?? {}) };
  merged.gatewayUrl = String(merged.gatewayUrl).replace(/\/+$/, "");
  return merged;
}

async function post(cfg, path, body) {
  const headers = { "content-type": "application/json" };
  if (cfg.token) headers.authorization = `Bearer ${cfg.token}`;
  const answer = await fetch(cfg.gatewayUrl + path, {
    method: "POST",
    headers,
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(cfg.timeoutMs),
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(`gateway answered ${answer.status}: ${data.error ?? ""}`);
  return data;
}

function scope(event, ctx) {
  const session = ctx?.sessionKey ?? event?.sessionKey ?? "openclaw";
  return { run_id: event?.runId ?? ctx?.runId ?? session, session_id: session, agent_id: ctx?.agentId ?? "main" };
}

let serial = 0;
function eventId() {
  serial += 1;
  return `openclaw-plugin-${process.pid}-${Date.now()}-${serial}`;
}

export function createHooks(config, logger) {
  const cfg = settings(config);
  return {
    async beforeToolCall(event, ctx) {
      try {
        const answer = await post(cfg, "/v1/decide", {
          ...scope(event, ctx),
          tool: event.toolName,
          params: event.params ?? {},
          tool_call_id: event.toolCallId ?? ctx?.toolCallId,
        });
        if (answer.decision === "block" || answer.decision === "abort") {
          return { block: true, blockReason: answer.message };
        }
        return undefined;
      } catch (error) {
        logger?.warn?.(`loopwatch: ${error.message}; ${cfg.failOpen ? "allowing" : "refusing"} the call`);
        return cfg.failOpen ? undefined : { block: true, blockReason: `loopwatch unreachable: ${error.message}` };
      }
    },
    async afterToolCall(event, ctx) {
      const outcome = event.error !== undefined && event.error !== null ? { error: String(event.error) } : { result: event.result ?? null };
      try {
        await post(cfg, "/v1/events", {
          type: "tool_result",
          event_id: eventId(),
          ...scope(event, ctx),
          tool: event.toolName,
          params: event.params ?? {},
          tool_call_id: event.toolCallId ?? ctx?.toolCallId,
          ...outcome,
        });
      } catch (error) {
        logger?.warn?.(`loopwatch: result not reported: ${error.message}`);
      }
    },
  };
}

export default {
  id: "loopwatch",
  name: "loopwatch",
  description: "Fleet-wide tool-loop detection: asks a loopwatch gateway before every tool call.",
  register(api) {
    const hooks = createHooks(api.pluginConfig ?? {}, api.logger);
    api.on("before_tool_call", hooks.beforeToolCall);
    api.on("after_tool_call", hooks.afterToolCall);
  },
};
