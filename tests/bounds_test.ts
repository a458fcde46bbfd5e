/**
 * One run cannot grow the response, the audit log or the server's memory without bound: a
 * million cheap or refused tool calls end at the timeout with a response of a fixed size, a
 * bounded number of audit lines, the earlier run's audit record kept, and the server's memory
 * back near where it was.
 *
 * @module
 */
import { join } from "node:path";
import { assert, assertEquals } from "./_assert.ts";
import { fixtureServer } from "./_env.ts";
import { eventually } from "./_proc.ts";
import { type ServerHarness, serverPid, startServer } from "./_stdio_server.ts";
import { residentMb } from "../bench/_machine.ts";
import { AUDIT_TOOL_CALLS_PER_RUN } from "../src/exec/run_audit.ts";
import { MAX_TOOL_CALL_RECORDS } from "../src/exec/requests/tool_bridge.ts";

const MAX_OUTPUT_BYTES = 100 * 1024;
/** The result's fixed allowance over maxOutputBytes: error text and the listed tool calls. */
const ALLOWANCE_BYTES = 64 * 1024;

async function settledRssMb(pid: number): Promise<number> {
  // Let the collector catch up with what the run left: take the lowest of a few readings.
  let low = Infinity;
  for (let i = 0; i < 10; i++) {
    await new Promise((r) => setTimeout(r, 200));
    low = Math.min(low, await residentMb(pid));
  }
  return low;
}

async function auditRecords(home: string): Promise<Array<Record<string, unknown>>> {
  const records = [];
  for (const file of ["audit.jsonl.1", "audit.jsonl"]) {
    const text = await Deno.readTextFile(join(home, file)).catch(() => "");
    for (const line of text.split("\n")) if (line) records.push(JSON.parse(line));
  }
  return records;
}

async function withServer(fn: (server: ServerHarness) => Promise<void>): Promise<void> {
  const server = await startServer({
    upstream: { fixture: fixtureServer({}) },
    env: { CODE_EXECUTOR_PYTHON_WARM_POOL: "1" },
    // A small audit log: one run that wrote a line per call would rotate the others out.
    settings: {
      limits: { maxOutputBytes: MAX_OUTPUT_BYTES },
      audit: { maxBytes: 256 * 1024, maxFiles: 2 },
    },
  });
  try {
    await fn(server);
  } finally {
    await server.close();
  }
}

interface Flood {
  name: string;
  tool: "run_typescript" | "run_python";
  code: string;
  /** The caller's allowedTools; by default pid is refused to the caller (the admin allows it). */
  allowedTools?: string[];
}

const FLOODS: Flood[] = [
  {
    // Real upstream calls until tools.maxCallsPerExecution (1000), refused ones after that.
    name: "awaited cheap calls",
    tool: "run_typescript",
    code: `for (let i = 0; i < 1_000_000; i++) {
  try { await callMCPTool("mcp__fixture__pid", {}); } catch {}
}`,
    allowedTools: ["mcp__fixture__*"],
  },
  {
    name: "awaited refused calls",
    tool: "run_typescript",
    code: `for (let i = 0; i < 1_000_000; i++) {
  try { await callMCPTool("mcp__fixture__pid", {}); } catch {}
}`,
  },
  {
    name: "a million calls not awaited",
    tool: "run_typescript",
    code: `for (let i = 0; i < 1_000_000; i++) callMCPTool("mcp__fixture__pid", {}).catch(() => {});
await new Promise(() => setInterval(() => {}, 1000));`,
  },
  {
    name: "awaited refused calls from Python",
    tool: "run_python",
    code: `for i in range(1_000_000):
    try:
        await call_mcp_tool("mcp__fixture__pid", {})
    except Exception:
        pass`,
  },
];

for (const flood of FLOODS) {
  Deno.test(`${flood.tool}: ${flood.name} end at the timeout with a bounded response, audit and memory`, async () => {
    await withServer(async (server) => {
      // The run before warms the server up with real work (the baseline is a server that has
      // served calls: V8 and the allocator keep the high-water mark of such work, measured
      // 90 -> 171 MB after 15,000 upstream calls and flat across further floods), and its audit
      // record must survive the flood.
      const before = await server.client.callTool({
        name: flood.tool,
        arguments: {
          code: flood.tool === "run_python"
            ? 'for i in range(1000):\n    await call_mcp_tool("mcp__fixture__pid", {})\n6 * 7'
            : 'for (let i = 0; i < 1000; i++) await callMCPTool("mcp__fixture__pid", {});\nreturn 6 * 7',
          timeoutMs: 60_000,
        },
      });
      assertEquals(before.isError, false, JSON.stringify(before));
      const pid = await serverPid(server);
      const baseline = await settledRssMb(pid);

      const response = await server.client.callTool({
        name: flood.tool,
        arguments: {
          code: flood.code,
          timeoutMs: 5_000,
          allowedTools: flood.allowedTools ?? ["mcp__fixture__slow"],
        },
      });
      const result = response.structuredContent as Record<string, unknown> & {
        toolCalls: unknown[];
        toolCallsOmitted?: number;
        error?: { type: string };
      };
      const size = new TextEncoder().encode(JSON.stringify(response)).length;
      const described = JSON.stringify({ ...result, toolCalls: result.toolCalls.length, size });
      assertEquals(result.error?.type, "TimeoutError", described);
      assertEquals(result.toolCalls.length, MAX_TOOL_CALL_RECORDS, described);
      assert((result.toolCallsOmitted ?? 0) > 0, described);
      assert(
        new TextEncoder().encode(JSON.stringify(result)).length <
          MAX_OUTPUT_BYTES + ALLOWANCE_BYTES,
        described,
      );
      // The text block repeats what structuredContent holds, and no more.
      assert(size < 2 * (MAX_OUTPUT_BYTES + ALLOWANCE_BYTES), described);

      const after = await settledRssMb(pid);
      assert(after < baseline * 1.5, `server RSS ${baseline} MB before, ${after} MB after`);

      // The next run works, and the audit log kept the record of the run before the flood.
      const next = await server.client.callTool({
        name: flood.tool,
        arguments: { code: flood.tool === "run_python" ? "1 + 1" : "return 1 + 1" },
      });
      assertEquals(next.isError, false, JSON.stringify(next));
      // Records are written after the response: wait for the third.
      let records: Array<Record<string, unknown>> = [];
      const executions = () => records.filter((r) => r.kind === "execution");
      await eventually(async () => {
        records = await auditRecords(server.tempDir);
        return executions().length >= 3;
      });
      assertEquals(executions().map((r) => r.outcome), ["ok", "error", "ok"]);
      const flooded = executions()[1].executionId;
      const lines = records.filter((r) => r.executionId === flooded);
      assert(
        lines.length <= AUDIT_TOOL_CALLS_PER_RUN + 2,
        `the flooded run wrote ${lines.length} audit lines`,
      );
      const omitted = lines.find((r) => r.kind === "tool_calls_omitted");
      assert(omitted && (omitted.count as number) > 0, JSON.stringify(omitted));
    });
  });
}
