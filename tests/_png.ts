/**
 * A PNG decoder of its own for tests, so that an image made in the sandbox with an npm package is
 * checked by code that shares nothing with it: 8-bit RGB or RGBA, not interlaced (what chart code
 * writes), chunks and CRCs checked, zlib through `node:zlib`.
 *
 * @module
 */
import { Buffer } from "node:buffer";
import { crc32, inflateSync } from "node:zlib";

/** A decoded image: `width * height` pixels of RGBA, row by row. */
export interface DecodedPng {
  width: number;
  height: number;
  /** RGBA bytes (alpha 255 for an RGB image). */
  rgba: Uint8Array;
}

const SIGNATURE = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

/**
 * Decodes a PNG.
 *
 * @param bytes The file.
 * @returns Its pixels.
 * @throws {Error} On anything but a well-formed 8-bit RGB(A) PNG.
 */
export function decodePng(bytes: Uint8Array): DecodedPng {
  if (!SIGNATURE.every((byte, i) => bytes[i] === byte)) throw new Error("not a PNG signature");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let width = 0, height = 0, channels = 0;
  const idat: Uint8Array[] = [];
  for (let at = 8; at < bytes.length;) {
    const length = view.getUint32(at);
    const type = new TextDecoder().decode(bytes.subarray(at + 4, at + 8));
    const data = bytes.subarray(at + 8, at + 8 + length);
    if (crc32(bytes.subarray(at + 4, at + 8 + length)) !== view.getUint32(at + 8 + length)) {
      throw new Error(`bad CRC in the ${type} chunk`);
    }
    if (type === "IHDR") {
      width = view.getUint32(at + 8);
      height = view.getUint32(at + 12);
      const [depth, color, , , interlace] = data.subarray(8);
      if (depth !== 8 || (color !== 2 && color !== 6) || interlace !== 0) {
        throw new Error(
          `unsupported PNG: depth ${depth}, color type ${color}, interlace ${interlace}`,
        );
      }
      channels = color === 6 ? 4 : 3;
    } else if (type === "IDAT") idat.push(data);
    else if (type === "IEND") break;
    at += 12 + length;
  }
  const raw = inflateSync(Buffer.concat(idat));
  const stride = width * channels;
  const pixels = new Uint8Array(height * stride);
  for (let y = 0; y < height; y++) {
    const filter = raw[y * (stride + 1)];
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1));
    for (let x = 0; x < stride; x++) {
      const a = x >= channels ? pixels[y * stride + x - channels] : 0;
      const b = y > 0 ? pixels[(y - 1) * stride + x] : 0;
      const c = x >= channels && y > 0 ? pixels[(y - 1) * stride + x - channels] : 0;
      const predicted = filter === 0
        ? 0
        : filter === 1
        ? a
        : filter === 2
        ? b
        : filter === 3
        ? (a + b) >> 1
        : filter === 4
        ? paeth(a, b, c)
        : NaN;
      if (Number.isNaN(predicted)) throw new Error(`unknown filter ${filter} on row ${y}`);
      pixels[y * stride + x] = (line[x] + predicted) & 0xff;
    }
  }
  if (channels === 4) return { width, height, rgba: pixels };
  const rgba = new Uint8Array(width * height * 4);
  for (let i = 0; i < width * height; i++) {
    rgba.set(pixels.subarray(i * 3, i * 3 + 3), i * 4);
    rgba[i * 4 + 3] = 255;
  }
  return { width, height, rgba };
}

function paeth(a: number, b: number, c: number): number {
  const p = a + b - c;
  const pa = Math.abs(p - a), pb = Math.abs(p - b), pc = Math.abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}
