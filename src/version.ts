/** The version of Code Executor, reported to clients and by `--version`. */
export const SERVER_VERSION = "0.1.0";
