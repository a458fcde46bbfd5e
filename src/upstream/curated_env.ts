/**
 * The environment a stdio upstream server starts with: a short list of the host's variables
 * that programs need to run (paths, locale, temp and config directories, certificates), plus
 * the server's own `env` from its config. Nothing else of the host's environment, API keys
 * included, reaches an upstream server.
 *
 * @module
 */

/** Environment variables passed through to stdio servers; nothing else of the host's is. */
const PASSED_ENV = [
  "PATH",
  "HOME",
  "USER",
  "LOGNAME",
  "SHELL",
  "TERM",
  "LANG",
  "LANGUAGE",
  "TZ",
  "TMPDIR",
  "TEMP",
  "TMP",
  "XDG_RUNTIME_DIR",
  "XDG_CONFIG_HOME",
  "XDG_CACHE_HOME",
  "XDG_DATA_HOME",
  "DENO_DIR",
  "NODE_EXTRA_CA_CERTS",
  "SSL_CERT_FILE",
  "SYSTEMROOT",
  "SYSTEMDRIVE",
  "WINDIR",
  "COMSPEC",
  "PATHEXT",
  "APPDATA",
  "LOCALAPPDATA",
  "USERPROFILE",
  "PROGRAMFILES",
];

/**
 * Builds the environment of a stdio server: the curated host variables plus its own `env`.
 *
 * @param hostEnv The host's environment.
 * @param own The server's configured `env`.
 * @returns The child's whole environment.
 */
export function curatedEnv(
  hostEnv: Record<string, string>,
  own: Record<string, string> = {},
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [key, value] of Object.entries(hostEnv)) {
    if (PASSED_ENV.includes(key) || key.startsWith("LC_")) env[key] = value;
  }
  return { ...env, ...own };
}
