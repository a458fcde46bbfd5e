/**
 * The program's version, read from `deno.json` (which every published package carries), so that
 * what clients are told and what the registry serves cannot drift apart.
 *
 * @module
 */
import config from "../deno.json" with { type: "json" };

/** The version of Code Executor, reported to clients and by `--version`. */
export const SERVER_VERSION: string = config.version;

/**
 * The name Code Executor gives itself in `serverInfo` (and `clientInfo`); an upstream that
 * answers initialize with it is Code Executor itself.
 */
export const SERVER_NAME = "code-executor";
