/**
 * Kept outputs as MCP resources: a result names each output it kept with a `resource_link`, and
 * `resources/read` of `code-executor://output/<id>` returns the whole text to the principal whose
 * run produced it (`local` on stdio, the token's over HTTP), and refuses anyone else; a kept
 * image comes back as a `blob` of its type. `resources/list` lists the caller's own kept outputs
 * only.
 *
 * @module
 */
import {
  type McpServer,
  ProtocolError,
  ProtocolErrorCode,
  ResourceNotFoundError,
  ResourceTemplate,
  type ServerContext,
} from "@modelcontextprotocol/server";
import { CodeExecutorError } from "../errors.ts";
import { LOCAL_PRINCIPAL } from "../principals.ts";
import { type KeptOutput, OUTPUT_URI_PREFIX } from "../exec/output_store.ts";

function principalOf(ctx: ServerContext): string {
  return ctx.http?.authInfo?.clientId ?? LOCAL_PRINCIPAL;
}

function mimeType(output: KeptOutput): string {
  if (output.part === "image") return output.mimeType ?? "application/octet-stream";
  return output.part === "returnValue" ? "application/json" : "text/plain";
}

function describe(output: KeptOutput): string {
  if (output.part === "image") {
    return `An image (${output.mimeType}) a run displayed that passed limits.maxOutputBytes, ${output.bytes} bytes of base64, kept until ${output.expiresAt}`;
  }
  return `The whole ${
    output.part === "returnValue" ? "return value (JSON)" : output.part
  } of a run, ${output.bytes} bytes, kept until ${output.expiresAt}; code reads it with readOutput("${output.id}") (Python: read_output)`;
}

/**
 * The `resource_link` content items for the outputs a result kept.
 *
 * @param outputs The result's `outputs`.
 * @returns One link each.
 */
export function outputLinks(outputs: KeptOutput[] | undefined): Array<{
  type: "resource_link";
  uri: string;
  name: string;
  description: string;
  mimeType: string;
  size?: number;
}> {
  return (outputs ?? []).map((output) => ({
    type: "resource_link" as const,
    uri: output.uri,
    name: `${output.part}-${output.id}`,
    description: describe(output),
    mimeType: mimeType(output),
    // `size` is the raw content's: an image's is in the result's `images` (it is kept as base64).
    ...(output.part === "image" ? {} : { size: output.bytes }),
  }));
}

/** Where a server finds the kept outputs (this process's, or the shared store's). */
export interface OutputResources {
  /** The outputs a principal may read (`resources/list`). */
  list(principal: string): Promise<KeptOutput[]>;
  /** Reads one for a client (tokenized with `privacy.tokenize`). */
  read(idOrUri: string, principal: string): Promise<KeptOutput & { text: string }>;
}

/**
 * Registers the kept outputs as a resource template on one server instance.
 *
 * @param server The server.
 * @param outputs Where the outputs are listed and read.
 * @internal It takes the MCP SDK's server type, which `deno doc --lint` takes for a private one
 * (denoland/deno#27364); the SDK documents it.
 */
export function registerOutputResources(server: McpServer, outputs: OutputResources): void {
  const template = new ResourceTemplate(`${OUTPUT_URI_PREFIX}{id}`, {
    list: async (ctx) => ({
      resources: (await listed(outputs, principalOf(ctx))).map((output) => ({
        uri: output.uri,
        name: `${output.part}-${output.id}`,
        description: describe(output),
        mimeType: mimeType(output),
        ...(output.part === "image" ? {} : { size: output.bytes }),
      })),
    }),
  });
  server.registerResource("kept-output", template, {
    title: "Kept output",
    description:
      "The whole stdout, stderr or return value of a run that passed limits.maxOutputBytes; readable by the principal whose run produced it",
  }, async (uri, _variables, ctx) => {
    try {
      const output = await outputs.read(uri.href, principalOf(ctx));
      return {
        contents: [
          output.part === "image"
            ? { uri: output.uri, mimeType: mimeType(output), blob: output.text }
            : { uri: output.uri, mimeType: mimeType(output), text: output.text },
        ],
      };
    } catch (error) {
      if (!(error instanceof CodeExecutorError)) throw error;
      if (error.type === "OutputNotFound") throw new ResourceNotFoundError(uri.href, error.message);
      throw new ProtocolError(ProtocolErrorCode.InvalidParams, error.message, {
        type: error.type,
      });
    }
  });
}

/** A principal's outputs; a store that cannot be reached is a protocol error that says so. */
async function listed(outputs: OutputResources, principal: string): Promise<KeptOutput[]> {
  try {
    return await outputs.list(principal);
  } catch (error) {
    if (!(error instanceof CodeExecutorError)) throw error;
    throw new ProtocolError(ProtocolErrorCode.InternalError, error.message, { type: error.type });
  }
}
