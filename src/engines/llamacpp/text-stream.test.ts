/**
 * TextStream over a fake detokenizer: each token stands for a few bytes of UTF-8, so a token
 * may end in the middle of a character exactly as a real byte-level vocabulary does.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { TextStream, type Detokenize } from "./text-stream.ts";

/** Token → its text, or raw UTF-8 bytes for tokens that carry part of a character. */
const vocabulary = new Map<number, string | number[]>([
  [1, "Hello"],
  [2, ","],
  [3, " world"],
  [4, "!"],
  [5, " E"],
  [6, "N"],
  [7, "D"],
  [8, " more"],
  [9, "ough"],
  [10, "\n\n"],
  [11, "User"],
  [12, ":"],
  [13, " caf"],
  // "é" is C3 A9.
  [20, [0xc3]],
  [21, [0xa9]],
  // "€" is E2 82 AC.
  [22, [0xe2]],
  [23, [0x82]],
  [24, [0xac]],
  // A lone continuation byte: never completes a character.
  [25, [0x80]],
  // "😀" is F0 9F 98 80.
  [26, [0xf0, 0x9f]],
  [27, [0x98, 0x80]],
]);

function bytesOf(token: number): Buffer {
  const entry = vocabulary.get(token);
  if (entry === undefined) throw new Error(`token ${token} is not in the test vocabulary`);
  return typeof entry === "string" ? Buffer.from(entry, "utf8") : Buffer.from(entry);
}

/** Decodes the tokens' bytes as UTF-8; an unfinished character at the end becomes "\uFFFD". */
const detokenize: Detokenize = (tokens) => Buffer.concat(tokens.map(bytesOf)).toString("utf8");

/** Feeds all tokens, then flushes unless stopped; returns every delta and the final state. */
function run(tokens: number[], stops: string[] = []) {
  const stream = new TextStream(detokenize, stops);
  const deltas: string[] = [];
  let stoppedAt = -1;
  for (const [index, token] of tokens.entries()) {
    const step = stream.push(token);
    deltas.push(step.text);
    if (step.stopped) {
      stoppedAt = index;
      break;
    }
  }
  const flushed = stream.flush();
  return { deltas, flushed, text: deltas.join("") + flushed, stoppedAt, stream };
}

describe("TextStream", () => {
  it("emits deltas that concatenate to the full text", () => {
    const result = run([1, 2, 3, 4]);
    assert.deepEqual(result.deltas, ["Hello", ",", " world", "!"]);
    assert.equal(result.flushed, "");
    assert.equal(result.text, "Hello, world!");
    assert.equal(result.stream.stopped, false);
  });

  it("ends at a stop sequence inside one token and emits nothing of it", () => {
    const result = run([1, 2, 3, 4, 8], [" world"]);
    assert.equal(result.stoppedAt, 2);
    assert.equal(result.text, "Hello,");
    assert.equal(result.stream.stopped, true);
  });

  it("ends at a stop sequence split over several tokens without emitting any part of it", () => {
    const result = run([1, 5, 6, 7, 8], [" END"]);
    assert.equal(result.stoppedAt, 3);
    assert.equal(result.text, "Hello");
    assert.deepEqual(result.deltas, ["Hello", "", "", ""]);
  });

  it("stops at a stop sequence that spans held text and the middle of the next token", () => {
    // "\n\nUser:" arrives as "\n\n" + "User" + ":".
    const result = run([1, 10, 11, 12, 3], ["\n\nUser:"]);
    assert.equal(result.text, "Hello");
    assert.equal(result.stoppedAt, 3);
  });

  it("returns nothing and stays stopped for tokens pushed after the stop", () => {
    const stream = new TextStream(detokenize, ["!"]);
    assert.deepEqual(stream.push(1), { text: "Hello", stopped: false });
    assert.deepEqual(stream.push(4), { text: "", stopped: true });
    assert.deepEqual(stream.push(3), { text: "", stopped: true });
    assert.equal(stream.flush(), "");
  });

  it("releases text that looked like the start of a stop sequence once it diverges", () => {
    // " EN" could begin " END"; "ough" proves it does not.
    const result = run([1, 5, 6, 9], [" END"]);
    assert.equal(result.stoppedAt, -1);
    assert.deepEqual(result.deltas, ["Hello", "", "", " ENough"]);
    assert.equal(result.text, "Hello ENough");
  });

  it("releases a held possible stop prefix at flush()", () => {
    const stream = new TextStream(detokenize, [" END"]);
    assert.equal(stream.push(1).text, "Hello");
    assert.equal(stream.push(5).text, "");
    assert.equal(stream.push(6).text, "");
    assert.equal(stream.flush(), " EN");
    assert.equal(stream.stopped, false);
  });

  it("lets the earliest of several stop sequences win", () => {
    // "Hello, world!": "!" is listed first but ", " comes earlier in the text.
    const result = run([1, 2, 3, 4], ["!", " world", ","]);
    assert.equal(result.text, "Hello");
    assert.equal(result.stream.stopped, true);
    assert.equal(result.stream.stoppedBy, ",", "the stop sequence met is the earliest in the text");
  });

  it("lets an earlier short stop win over a longer one still being held", () => {
    // " END" is being matched when "N" completes the shorter stop "EN" earlier in the text.
    const result = run([1, 5, 6, 7], [" END", "EN"]);
    assert.equal(result.text, "Hello ");
    assert.equal(result.stoppedAt, 2);
    assert.equal(result.stream.stoppedBy, "EN");
  });

  it("names the stop sequence that ended it, as given (split over tokens too); none when none did", () => {
    assert.equal(run([1, 5, 6, 7, 8], [" END"]).stream.stoppedBy, " END");
    assert.equal(run([13, 20, 21, 3], ["é"]).stream.stoppedBy, "é");
    // Two met at one place in one token: the first given wins.
    assert.equal(run([1, 3], [" wor", " w"]).stream.stoppedBy, " wor");
    assert.equal(run([1, 3], [" w", " wor"]).stream.stoppedBy, " w");
    assert.equal(run([1, 2, 3, 4], ["zzz"]).stream.stoppedBy, undefined);
    assert.equal(run([1, 5, 6, 9], [" END"]).stream.stoppedBy, undefined, "a held prefix that diverged ended nothing");
  });

  it("holds a two-byte character split over two tokens until it is complete", () => {
    const stream = new TextStream(detokenize, []);
    assert.equal(stream.push(13).text, " caf");
    assert.deepEqual(stream.push(20), { text: "", stopped: false });
    assert.deepEqual(stream.push(21), { text: "é", stopped: false });
  });

  it("holds a three-byte character split over three tokens until it is complete", () => {
    const result = run([22, 23, 24, 4]);
    assert.deepEqual(result.deltas, ["", "", "€", "!"]);
    assert.ok(!result.text.includes("\uFFFD"));
  });

  it("holds a four-byte character split over two tokens until it is complete", () => {
    const result = run([1, 26, 27]);
    assert.deepEqual(result.deltas, ["Hello", "", "😀"]);
  });

  it("finds a stop sequence made of a multi-byte character split over tokens", () => {
    const result = run([13, 20, 21, 3], ["é"]);
    assert.equal(result.text, " caf");
    assert.equal(result.stream.stopped, true);
  });

  it("flush() returns an unfinished character's text as the detokenizer gives it", () => {
    const stream = new TextStream(detokenize, []);
    assert.equal(stream.push(1).text, "Hello");
    assert.equal(stream.push(22).text, "");
    assert.equal(stream.flush(), "\uFFFD");
  });

  it("flush() returns held stop-prefix text together with pending tokens", () => {
    const stream = new TextStream(detokenize, [" END"]);
    stream.push(1);
    stream.push(5);
    stream.push(20);
    assert.equal(stream.flush(), " E\uFFFD");
  });

  it("flush() returns nothing more once everything was emitted", () => {
    const stream = new TextStream(detokenize, ["zzz"]);
    stream.push(1);
    assert.equal(stream.flush(), "");
  });

  it("gives up holding after eight tokens that never complete a character", () => {
    const stream = new TextStream(detokenize, []);
    for (let count = 1; count < 8; count++) assert.equal(stream.push(25).text, "", `token ${count} is held`);
    assert.equal(stream.push(25).text, "\uFFFD".repeat(8));
  });

  it("ignores empty stop strings", () => {
    const result = run([1, 2, 3], ["", ""]);
    assert.equal(result.text, "Hello, world");
    assert.deepEqual(result.deltas, ["Hello", ",", " world"]);
    assert.equal(result.stream.stopped, false);
  });

  it("ignores empty stop strings among real ones", () => {
    const result = run([1, 2, 3], ["", " world"]);
    assert.equal(result.text, "Hello,");
    assert.equal(result.stream.stopped, true);
  });

  it("gives the detokenizer the last decoded tokens as context", () => {
    const contexts: number[][] = [];
    const recording: Detokenize = (tokens, lastTokens) => {
      contexts.push([...lastTokens]);
      return detokenize(tokens, lastTokens);
    };
    const stream = new TextStream(recording, []);
    for (const token of [1, 2, 3, 4, 8, 9]) stream.push(token);
    assert.deepEqual(contexts[0], []);
    assert.deepEqual(contexts[1], [1]);
    assert.deepEqual(contexts.at(-1), [2, 3, 4, 8]);
  });

  it("counts the characters produced, held-back text included, a split character once it completes", () => {
    const stream = new TextStream(detokenize, [" E"]);
    const starts: number[] = [];
    for (const token of [13, 20, 21, 3, 5]) {
      starts.push(stream.produced);
      stream.push(token);
    }
    // " caf" 0..4, "é" (two tokens) at 4, " world" at 5, " E" at 11 (held back, then cut).
    assert.deepEqual(starts, [0, 4, 4, 5, 11]);
    assert.equal(stream.produced, 13);
  });
});
