/**
 * Derives a GGUF file from another at test time: metadata set or replaced, and tokens added to
 * the vocabulary (with seeded rows appended to the token embedding and output matrices, F32 only).
 * Written from the GGUF v3 layout (header, key/values, tensor infos, aligned data); nothing is
 * committed, every derived file is made again from `../shared/models/` and is byte-for-byte the
 * same for the same arguments.
 */
import { readFileSync, writeFileSync, renameSync, existsSync, mkdirSync } from "node:fs";
import { createHash } from "node:crypto";
import os from "node:os";
import path from "node:path";

/** GGUF value types. */
const T = { U8: 0, I8: 1, U16: 2, I16: 3, U32: 4, I32: 5, F32: 6, BOOL: 7, STRING: 8, ARRAY: 9, U64: 10, I64: 11, F64: 12 } as const;

/** A metadata value with its GGUF type (arrays carry their items' type). */
export type GgufValue =
  | { type: "u32"; value: number }
  | { type: "i32"; value: number }
  | { type: "f32"; value: number }
  | { type: "bool"; value: boolean }
  | { type: "string"; value: string }
  | { type: "raw"; valueType: number; bytes: Buffer };

type Kv = { key: string; valueType: number; bytes: Buffer };
type TensorInfo = { name: string; dims: bigint[]; type: number; offset: bigint };

class Reader {
  offset = 0;
  readonly buffer: Buffer;
  constructor(buffer: Buffer) {
    this.buffer = buffer;
  }
  u32(): number {
    const value = this.buffer.readUInt32LE(this.offset);
    this.offset += 4;
    return value;
  }
  u64(): bigint {
    const value = this.buffer.readBigUInt64LE(this.offset);
    this.offset += 8;
    return value;
  }
  string(): string {
    const length = Number(this.u64());
    const value = this.buffer.toString("utf8", this.offset, this.offset + length);
    this.offset += length;
    return value;
  }
  /** Skips a value of this type, returning its bytes. */
  value(type: number): Buffer {
    const start = this.offset;
    this.skip(type);
    return this.buffer.subarray(start, this.offset);
  }
  skip(type: number): void {
    switch (type) {
      case T.U8:
      case T.I8:
      case T.BOOL:
        this.offset += 1;
        return;
      case T.U16:
      case T.I16:
        this.offset += 2;
        return;
      case T.U32:
      case T.I32:
      case T.F32:
        this.offset += 4;
        return;
      case T.U64:
      case T.I64:
      case T.F64:
        this.offset += 8;
        return;
      case T.STRING:
        this.string();
        return;
      case T.ARRAY: {
        const itemType = this.u32();
        const count = Number(this.u64());
        for (let i = 0; i < count; i++) this.skip(itemType);
        return;
      }
      default:
        throw new Error(`unknown GGUF value type ${type}`);
    }
  }
}

function stringBytes(value: string): Buffer {
  const text = Buffer.from(value, "utf8");
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(text.length));
  return Buffer.concat([length, text]);
}

function encode(value: GgufValue): { valueType: number; bytes: Buffer } {
  const buffer = Buffer.alloc(4);
  switch (value.type) {
    case "u32":
      buffer.writeUInt32LE(value.value);
      return { valueType: T.U32, bytes: buffer };
    case "i32":
      buffer.writeInt32LE(value.value);
      return { valueType: T.I32, bytes: buffer };
    case "f32":
      buffer.writeFloatLE(value.value);
      return { valueType: T.F32, bytes: buffer };
    case "bool":
      return { valueType: T.BOOL, bytes: Buffer.from([value.value ? 1 : 0]) };
    case "string":
      return { valueType: T.STRING, bytes: stringBytes(value.value) };
    case "raw":
      return { valueType: value.valueType, bytes: value.bytes };
  }
}

/** Reads a string array (the vocabulary) from a key's bytes. */
function readArray(kv: Kv): { itemType: number; items: Buffer[] } {
  const reader = new Reader(kv.bytes);
  const itemType = reader.u32();
  const count = Number(reader.u64());
  const items: Buffer[] = [];
  for (let i = 0; i < count; i++) items.push(reader.value(itemType));
  return { itemType, items };
}

function writeArray(itemType: number, items: Buffer[]): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt32LE(itemType, 0);
  head.writeBigUInt64LE(BigInt(items.length), 4);
  return Buffer.concat([head, ...items]);
}

/** A seeded generator (mulberry32): the same seed gives the same rows. */
function seeded(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type DeriveOptions = {
  /** Keys to set (added, or replacing the value of a key already there). */
  set?: Record<string, GgufValue>;
  /**
   * Tokens appended to the vocabulary, as control tokens (type 3) with score 0; rows of small
   * seeded values are appended to `token_embd.weight` and `output.weight` (F32 only). Their ids
   * are the old vocabulary size onwards, in this order.
   */
  addTokens?: string[];
  seed?: number;
};

/** Derives `to` from `from` (see `DeriveOptions`); written to a temporary name and renamed, so a reader never sees half a file. */
export function deriveGguf(from: string, to: string, options: DeriveOptions): void {
  const source = readFileSync(from);
  const reader = new Reader(source);
  if (source.toString("ascii", 0, 4) !== "GGUF") throw new Error(`${from} is not a GGUF file`);
  reader.offset = 4;
  const version = reader.u32();
  if (version !== 3) throw new Error(`GGUF version ${version}: only version 3 is supported`);
  const tensorCount = Number(reader.u64());
  const kvCount = Number(reader.u64());
  const kvs: Kv[] = [];
  for (let i = 0; i < kvCount; i++) {
    const key = reader.string();
    const valueType = reader.u32();
    kvs.push({ key, valueType, bytes: reader.value(valueType) });
  }
  const tensors: TensorInfo[] = [];
  for (let i = 0; i < tensorCount; i++) {
    const name = reader.string();
    const dimCount = reader.u32();
    const dims = Array.from({ length: dimCount }, () => reader.u64());
    tensors.push({ name, dims, type: reader.u32(), offset: reader.u64() });
  }
  const alignmentKv = kvs.find((kv) => kv.key === "general.alignment");
  const alignment = alignmentKv === undefined ? 32 : alignmentKv.bytes.readUInt32LE(0);
  const dataStart = Math.ceil(reader.offset / alignment) * alignment;

  // Each tensor's data, in file order.
  const sorted = [...tensors].sort((a, b) => Number(a.offset - b.offset));
  const data = new Map<string, Buffer>();
  for (let i = 0; i < sorted.length; i++) {
    const tensor = sorted[i]!;
    const start = dataStart + Number(tensor.offset);
    const end = i + 1 < sorted.length ? dataStart + Number(sorted[i + 1]!.offset) : source.length;
    data.set(tensor.name, source.subarray(start, end));
  }
  // Exact sizes (F32 only where rows are appended; other tensors keep their padded bytes).
  const f32Size = (tensor: TensorInfo) => tensor.dims.reduce((a, b) => a * Number(b), 1) * 4;

  const added = options.addTokens ?? [];
  if (added.length > 0) {
    const random = seeded(options.seed ?? 1);
    const tokens = kvs.find((kv) => kv.key === "tokenizer.ggml.tokens")!;
    const vocab = readArray(tokens);
    tokens.bytes = writeArray(vocab.itemType, [...vocab.items, ...added.map(stringBytes)]);
    for (const [key, make] of [
      ["tokenizer.ggml.scores", () => Buffer.alloc(4)],
      ["tokenizer.ggml.token_type", () => Buffer.from([3, 0, 0, 0])],
    ] as const) {
      const kv = kvs.find((entry) => entry.key === key);
      if (kv === undefined) continue;
      const array = readArray(kv);
      kv.bytes = writeArray(array.itemType, [...array.items, ...added.map(make)]);
    }
    for (const name of ["token_embd.weight", "output.weight"]) {
      const tensor = tensors.find((entry) => entry.name === name);
      if (tensor === undefined) continue;
      if (tensor.type !== 0) throw new Error(`${name} is not F32: rows can be appended to F32 tensors only`);
      const width = Number(tensor.dims[0]);
      const rows = Buffer.alloc(width * added.length * 4);
      for (let i = 0; i < width * added.length; i++) rows.writeFloatLE((random() - 0.5) * 0.02, i * 4);
      data.set(name, Buffer.concat([data.get(name)!.subarray(0, f32Size(tensor)), rows]));
      tensor.dims[1] = tensor.dims[1]! + BigInt(added.length);
    }
  }
  for (const [key, value] of Object.entries(options.set ?? {})) {
    const encoded = encode(value);
    const existing = kvs.find((kv) => kv.key === key);
    if (existing === undefined) kvs.push({ key, ...encoded });
    else Object.assign(existing, encoded);
  }

  // Header, then the tensors' data at aligned offsets.
  const header: Buffer[] = [];
  const counts = Buffer.alloc(24);
  counts.write("GGUF", 0, "ascii");
  counts.writeUInt32LE(3, 4);
  counts.writeBigUInt64LE(BigInt(tensors.length), 8);
  counts.writeBigUInt64LE(BigInt(kvs.length), 16);
  header.push(counts);
  for (const kv of kvs) {
    const type = Buffer.alloc(4);
    type.writeUInt32LE(kv.valueType);
    header.push(stringBytes(kv.key), type, kv.bytes);
  }
  let offset = 0;
  const body: Buffer[] = [];
  for (const tensor of tensors) {
    const bytes = data.get(tensor.name)!;
    const padded = Math.ceil(offset / alignment) * alignment;
    if (padded > offset) body.push(Buffer.alloc(padded - offset));
    offset = padded;
    const dimCount = Buffer.alloc(4);
    dimCount.writeUInt32LE(tensor.dims.length);
    const dims = Buffer.alloc(8 * tensor.dims.length);
    tensor.dims.forEach((dim, index) => dims.writeBigUInt64LE(dim, index * 8));
    const tail = Buffer.alloc(12);
    tail.writeUInt32LE(tensor.type, 0);
    tail.writeBigUInt64LE(BigInt(offset), 4);
    header.push(stringBytes(tensor.name), dimCount, dims, tail);
    body.push(bytes);
    offset += bytes.length;
  }
  const headerBytes = Buffer.concat(header);
  const start = Math.ceil(headerBytes.length / alignment) * alignment;
  const file = Buffer.concat([headerBytes, Buffer.alloc(start - headerBytes.length), ...body]);
  const temporary = `${to}.${process.pid}.tmp`;
  writeFileSync(temporary, file);
  renameSync(temporary, to);
}

/** Derives once per set of arguments into the temp folder (named by a hash of them), and returns the path. */
export function derivedModel(from: string, name: string, options: DeriveOptions): string {
  const hash = createHash("sha256")
    .update(readFileSync(from))
    .update(JSON.stringify(options))
    .digest("hex")
    .slice(0, 16);
  const folder = path.join(os.tmpdir(), "turnpike-test-models");
  mkdirSync(folder, { recursive: true });
  const to = path.join(folder, `${name}-${hash}.gguf`);
  if (!existsSync(to)) deriveGguf(from, to, options);
  return to;
}
