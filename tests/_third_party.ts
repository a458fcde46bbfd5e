/**
 * The third-party programs the tests run under Deno (the npm MCP servers, the conformance suite,
 * oidc-provider): the Deno config they run under.
 *
 * `third_party/deno.json` maps, and `third_party/deno.lock` locks, the npm packages that only tests
 * use. They stay out of the project's `deno.json` and `deno.lock` because a `deno run` installs
 * every package its lockfile names, reachable or not: with them in the project's lock, a user's
 * first `deno task start` installed 146 npm packages instead of 26 (measured with an empty
 * `DENO_DIR`). A test-only package run from the repository without this config would be written
 * into the project's lock, so every Deno run of one passes {@linkcode THIRD_PARTY_CONFIG}.
 *
 * @module
 */
import { fileURLToPath } from "node:url";

/** `tests/third_party/deno.json`, for `deno run --config` of a test-only npm package. */
export const THIRD_PARTY_CONFIG = fileURLToPath(new URL("third_party/deno.json", import.meta.url));
