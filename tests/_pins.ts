/**
 * The one place the upstream versions are pinned: tests and benchmarks import them, and `.ci/run`
 * pre-fetches every `@modelcontextprotocol/...@x.y.z` named in this file.
 *
 * @module
 */

/** server-everything from npm, as `deno run -A` takes it. */
export const EVERYTHING = "npm:@modelcontextprotocol/server-everything@2026.8.31";
/** server-filesystem from npm. */
export const FILESYSTEM = "npm:@modelcontextprotocol/server-filesystem@2026.8.31";
/** server-memory from npm. */
export const MEMORY = "npm:@modelcontextprotocol/server-memory@2026.8.31";
/** The MCP Inspector CLI, as `npx` takes it. */
export const INSPECTOR = "@modelcontextprotocol/inspector@2.12.0";
/**
 * The MCP conformance suite, as `deno run -A` takes it: its CLI needs Node 22's `fs.globSync`, so
 * it runs under Deno rather than the machine's Node 20.
 */
export const CONFORMANCE = "npm:@modelcontextprotocol/conformance@0.2.0-alpha.12";
