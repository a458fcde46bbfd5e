/**
 * `setup --http-token`: a new bearer token for `serve --http`, printed alone on stdout and
 * optionally added to the tokens file under a principal's name.
 *
 * @module
 */
import { resolve } from "node:path";
import { loadSettings } from "../config/settings.ts";
import { appendTokenLine, generateToken } from "../server/http_auth.ts";

/** Options of {@linkcode addHttpToken}. */
export interface HttpTokenOptions {
  /** The name the token stands for; with it, the token is added to the tokens file. */
  principal?: string;
  /** The tokens file; `http.tokensFile` from the settings when omitted. */
  tokensFile?: string;
  /** Environment for the settings; defaults to the process's. */
  env?: Record<string, string>;
  /** Directory for the project settings; the cwd by default. */
  cwd?: string;
}

/**
 * `setup --http-token`: prints a new random bearer token for `serve --http` on stdout (and
 * nothing else, so that `$(code-executor setup --http-token)` is the token). With a principal it
 * also appends `principal token` to the tokens file, which is created with mode 0600.
 *
 * @param options The principal and the tokens file.
 * @param io Where the token (`write`) and the explanation (`progress`) go.
 * @returns The exit code, 0.
 * @throws {TypeError} When a tokens file is given without a principal, a principal without any
 *   tokens file, or the file or principal is refused (see {@linkcode appendTokenLine}).
 */
export async function addHttpToken(
  options: HttpTokenOptions,
  io: { write(text: string): void; progress(text: string): void },
): Promise<number> {
  const token = generateToken();
  if (options.principal === undefined) {
    if (options.tokensFile !== undefined) {
      throw new TypeError(
        "--tokens-file needs --principal NAME: each line of the file is `principal token`",
      );
    }
    io.write(`${token}\n`);
    io.progress(
      'Give this token to `serve --http` as CODE_EXECUTOR_HTTP_TOKEN (principal "default"), or add a named one to a tokens file with --principal NAME\n',
    );
    return 0;
  }
  const { settings } = await loadSettings({ env: options.env, cwd: options.cwd });
  const configured = settings.http.tokensFile;
  const path = options.tokensFile ?? configured;
  if (path === undefined) {
    throw new TypeError(
      "Cannot add the token: no tokens file; pass --tokens-file PATH or set http.tokensFile",
    );
  }
  await appendTokenLine(path, options.principal, token);
  io.write(`${token}\n`);
  io.progress(
    `Added "${options.principal}" to ${path} (mode 0600)${
      resolve(path) === (configured && resolve(configured))
        ? ""
        : `; point http.tokensFile (or CODE_EXECUTOR_HTTP_TOKENS_FILE) at it`
    }. Clients send the token as "Authorization: Bearer <token>"\n`,
  );
  return 0;
}
