// Types of @loopwatch/ai-sdk (index.js), for `ai` 7.
import type { GenericToolApprovalFunction, StopCondition, ToolApprovalConfiguration, ToolSet } from "ai";

/** The failures a Loopwatch keeps in `failures` (the newest last; `failureCount` goes on). */
export declare const FAILURES_KEPT: number;

export interface LoopwatchOptions {
  /** Where `loopwatch gateway` listens (default: `LOOPWATCH_GATEWAY_URL`, else `http://127.0.0.1:6070`). */
  gatewayUrl?: string;
  /** A bearer token of the gateway's `LOOPWATCH_GATEWAY_TOKENS` (default: `LOOPWATCH_GATEWAY_TOKEN`). */
  token?: string;
  /** The agent's id in loopwatch (default `"default"`). */
  agentId?: string;
  /** How long one request to the gateway may take, in milliseconds (default 2000). */
  timeoutMs?: number;
  /** A call the gateway cannot decide goes on (`true`, the default) or is refused (`false`). */
  failOpen?: boolean;
  /** Where failures are told (default `console`; at most once a minute); `null`: nowhere. */
  logger?: { warn?: (message: string) => void } | null;
}

export interface LoopwatchRunOptions<TOOLS extends ToolSet> {
  /** The tools of the call; the ones with an `execute` are guarded. */
  tools?: TOOLS;
  /** Your stop conditions (default: generateText's, one step); loopwatch's is added. */
  stopWhen?: StopCondition<NoInfer<TOOLS>, any> | Array<StopCondition<NoInfer<TOOLS>, any>>;
  /** Your own tool approval, asked after loopwatch allowed a call. */
  toolApproval?: ToolApprovalConfiguration<NoInfer<TOOLS>, any>;
  /** Your own `onEnd`, called after the run's end was reported. */
  onEnd?: (event: any) => unknown;
  /** The run's id (default: a new `ai-sdk-<uuid>`). */
  runId?: string;
  /** A session (conversation) the run belongs to. */
  sessionId?: string;
  /** The run that started this one (default: the run whose tool is executing, if any). */
  parentRunId?: string;
}

/** Why loopwatch ended a run: the abort's reason code, and the words the model was given. */
export interface LoopwatchAbort {
  reason?: string;
  message?: string;
}

/** What a run gives generateText / streamText. */
export interface LoopwatchSettings<TOOLS extends ToolSet> {
  tools: TOOLS;
  toolApproval: GenericToolApprovalFunction<TOOLS, any, any>;
  stopWhen: Array<StopCondition<TOOLS, any>>;
  onEnd: (event: any) => Promise<void>;
}

export declare class Loopwatch {
  constructor(options?: LoopwatchOptions);
  readonly gatewayUrl: string;
  readonly agentId: string;
  readonly timeoutMs: number;
  readonly failOpen: boolean;
  /** The latest failures (the newest last): requests the gateway did not answer. */
  failures: string[];
  /** How many failures there were in all. */
  failureCount: number;
  /** The settings of one generateText / streamText call, as one loopwatch run. */
  run<TOOLS extends ToolSet>(options?: LoopwatchRunOptions<TOOLS>): LoopwatchRun<TOOLS>;
}

export declare class LoopwatchRun<TOOLS extends ToolSet = ToolSet> {
  /** The run's id at the gateway (a new one once the run ended and is used again). */
  readonly runId: string;
  readonly sessionId: string | undefined;
  readonly parentRunId: string | undefined;
  /** Set once loopwatch aborted the run. */
  readonly aborted: LoopwatchAbort | undefined;
  /** The tools, each `execute` guarded. */
  readonly tools: TOOLS;
  /** Asks the gateway before each call: `{type: "denied", reason}` for a block or an abort. */
  readonly toolApproval: LoopwatchSettings<TOOLS>["toolApproval"];
  /** True once the run was aborted. */
  readonly stopCondition: StopCondition<TOOLS, any>;
  /** Your stop conditions and `stopCondition`. */
  readonly stopWhen: Array<StopCondition<TOOLS, any>>;
  /** Reports the run's end, then calls your `onEnd`. */
  readonly onEnd: (event: any) => Promise<void>;
  /** `{tools, toolApproval, stopWhen, onEnd}`: spread it into generateText / streamText. */
  readonly settings: LoopwatchSettings<TOOLS>;
  /** Reports the run's end (a `run_end`); `onEnd` does it when the call finishes. */
  end(): Promise<void>;
}

/** The error of a warned call whose tool threw: the tool's error is its `cause`; its message is
 * the tool's, then loopwatch's warning (what the model reads). */
export declare class WarnedToolError extends Error {
  constructor(error: unknown, warning: string);
}

/** JSON as loopwatch is sent it: BigInt as digits, ±Infinity and NaN as their names, a value
 * that contains itself as "[Circular]". */
export declare function jsonText(value: unknown): string | undefined;
