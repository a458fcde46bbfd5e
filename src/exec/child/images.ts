/**
 * Images that sandbox code displays (`display(data, mimeType)`): the `display` request is
 * untrusted like every frame, so the host checks each image itself before it becomes `image`
 * content of the result: a type from a short list, base64 that decodes, the magic bytes of a
 * raster format (an SVG: UTF-8 text whose root element is `<svg>`), and a size cap.
 *
 * @module
 */
import { CodeExecutorError } from "../../errors.ts";

/** The image types `display()` takes: those MCP clients and model APIs show (SVG the fewest). */
export const IMAGE_MIME_TYPES: readonly string[] = [
  "image/png",
  "image/jpeg",
  "image/gif",
  "image/webp",
  "image/svg+xml",
];

/**
 * The largest image, in bytes: its `display` frame (base64 in JSON, 4/3 of it) stays under the
 * 8 MiB a frame may have. Model APIs take up to about 5 MB an image.
 */
export const MAX_IMAGE_BYTES = 4 * 1024 * 1024;

/** Images one run may display: each is a content block of the result. */
export const MAX_IMAGES_PER_RUN = 32;

/** An image checked by {@linkcode readImage}. */
export interface CheckedImage {
  /** One of {@linkcode IMAGE_MIME_TYPES}. */
  mimeType: string;
  /** The image as base64 (as MCP `image` content carries it). */
  data: string;
  /** Its size in bytes, decoded. */
  bytes: number;
}

const RASTER_MAGIC: Record<string, Array<Array<number | undefined>>> = {
  "image/png": [[0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]],
  "image/jpeg": [[0xff, 0xd8, 0xff]],
  "image/gif": [[0x47, 0x49, 0x46, 0x38, 0x37, 0x61], [0x47, 0x49, 0x46, 0x38, 0x39, 0x61]],
  // RIFF, a 4-byte size, WEBP.
  "image/webp": [[
    0x52,
    0x49,
    0x46,
    0x46,
    undefined,
    undefined,
    undefined,
    undefined,
    0x57,
    0x45,
    0x42,
    0x50,
  ]],
};

/**
 * Whether a text is an SVG document: an optional XML declaration, comments and a doctype, then
 * the `<svg` root element. A loop rather than one regular expression, which would backtrack
 * exponentially over many comments.
 */
function isSvgDocument(text: string): boolean {
  let at = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  const skipSpace = () => {
    while (at < text.length && /\s/.test(text[at])) at++;
  };
  const skipPast = (end: string) => {
    const found = text.indexOf(end, at);
    at = found < 0 ? text.length : found + end.length;
  };
  skipSpace();
  if (text.startsWith("<?xml", at)) skipPast("?>");
  while (true) {
    skipSpace();
    if (text.startsWith("<!--", at)) skipPast("-->");
    else if (text.startsWith("<!DOCTYPE", at)) {
      const subset = text.indexOf("[", at);
      const close = text.indexOf(">", at);
      if (subset >= 0 && subset < close) {
        at = subset;
        skipPast("]");
      }
      skipPast(">");
    } else break;
  }
  return /^<svg[\s>/]/.test(text.slice(at, at + 5));
}

function refused(message: string): CodeExecutorError {
  return new CodeExecutorError("TypeError", `display(data, mimeType): ${message}`);
}

/**
 * Checks the arguments of a `display` request (a frame's `args`, untrusted).
 *
 * @param args `{mimeType, data}`: `data` the image as base64.
 * @returns The image.
 * @throws {CodeExecutorError} `TypeError`, saying what is wrong with it.
 */
export function readImage(args: unknown): CheckedImage {
  const fields = (typeof args === "object" && args !== null ? args : {}) as Record<string, unknown>;
  const { mimeType, data } = fields;
  if (typeof mimeType !== "string" || !IMAGE_MIME_TYPES.includes(mimeType)) {
    throw refused(`mimeType must be one of ${IMAGE_MIME_TYPES.join(", ")}`);
  }
  if (typeof data !== "string") throw refused("the image must come as base64 text");
  if (data.length > Math.ceil(MAX_IMAGE_BYTES / 3) * 4) {
    throw refused(`the image is larger than ${MAX_IMAGE_BYTES} bytes; make it smaller`);
  }
  let bytes: Uint8Array;
  try {
    bytes = Uint8Array.fromBase64(data, { lastChunkHandling: "strict" });
  } catch {
    throw refused(
      `the ${mimeType} image is not valid base64 (pass its bytes, a Uint8Array, rather than text)`,
    );
  }
  if (bytes.length === 0) throw refused("the image is empty");
  const magic = RASTER_MAGIC[mimeType];
  if (magic) {
    const matches = magic.some((prefix) =>
      prefix.every((byte, i) => byte === undefined || bytes[i] === byte)
    );
    if (!matches) {
      throw refused(
        `the bytes are not ${mimeType}: they do not start with the format's signature`,
      );
    }
  } else {
    let text: string;
    try {
      // Streaming: a character cut at the end of the prefix read is not an error.
      text = new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(0, 64 * 1024), {
        stream: true,
      });
    } catch {
      throw refused("an image/svg+xml image must be UTF-8 text");
    }
    if (!isSvgDocument(text)) {
      throw refused("an image/svg+xml image must be an SVG document (its root element <svg>)");
    }
  }
  return { mimeType, data, bytes: bytes.length };
}
