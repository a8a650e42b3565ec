/**
 * Checks an `image_url` content part's URL, engine-neutrally: an http(s) URL, or a `data:` URL
 * holding base64 of a known image type whose bytes start with that type's signature.
 */
import { InvalidRequestError } from "./errors.ts";

/** Image types accepted in data URLs, with the bytes their files start with. */
const IMAGE_SIGNATURES: Record<string, (bytes: Buffer) => boolean> = {
  "image/png": (bytes) => bytes.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
  "image/jpeg": (bytes) => bytes[0] === 0xff && bytes[1] === 0xd8 && bytes[2] === 0xff,
  "image/gif": (bytes) => bytes.subarray(0, 6).toString("latin1") === "GIF87a" || bytes.subarray(0, 6).toString("latin1") === "GIF89a",
  "image/webp": (bytes) => bytes.subarray(0, 4).toString("latin1") === "RIFF" && bytes.subarray(8, 12).toString("latin1") === "WEBP",
};

export const IMAGE_MIME_TYPES = Object.keys(IMAGE_SIGNATURES);

const base64Pattern = /^[A-Za-z0-9+/]*={0,2}$/;

/** Why `url` is not an acceptable image URL, or undefined when it is. */
export function imageUrlProblem(url: string): string | undefined {
  if (url.startsWith("data:")) {
    const match = /^data:([^;,]+);base64,(.*)$/s.exec(url);
    if (match === null) return "a data URL must have the form 'data:<image type>;base64,<data>'";
    const mimeType = match[1]!.toLowerCase();
    const data = match[2]!;
    const signature = IMAGE_SIGNATURES[mimeType];
    if (signature === undefined) return `'${mimeType}' is not a supported image type (use one of ${IMAGE_MIME_TYPES.join(", ")})`;
    if (data.length === 0 || data.length % 4 !== 0 || !base64Pattern.test(data)) return "the data URL's data is not valid base64";
    if (!signature(Buffer.from(data, "base64"))) return `the data URL's data is not a ${mimeType} image`;
    return undefined;
  }
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return "expected an http(s) URL or a base64 data URL";
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `'${parsed.protocol}' URLs are not supported; use http(s) or a base64 data URL`;
  return undefined;
}

/**
 * The one refusal of an image sent to a model that reads text only: each dialect's translation
 * calls it (only the dialect knows where the part stood), when the model's capabilities
 * (`inputModalities`) leave images out; engines never see such a request.
 */
export function modelReadsNoImages(param: string, what = "image content parts"): InvalidRequestError {
  return new InvalidRequestError(
    `This model does not accept images (${what}); it reads text only. GET /v1/models lists each model's input modalities.`,
    param,
    "model_does_not_support_images",
  );
}
