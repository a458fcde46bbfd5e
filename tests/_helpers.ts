/**
 * The test harness by its old name, for code written before it was split by job: each module
 * below is the one to import from.
 *
 * @module
 */
export * from "./_pins.ts";
export * from "./_env.ts";
export * from "./_proc.ts";
export * from "./_command.ts";
export * from "./_fs.ts";
export * from "./_executor.ts";
export * from "./_skills.ts";
export * from "./_stdio_server.ts";
export * from "./_http_server.ts";
export * from "./_client.ts";
