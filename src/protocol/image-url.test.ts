/** imageUrlProblem: http(s) URLs and base64 data URLs of known image types pass; anything else is named. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { imageUrlProblem } from "./image-url.ts";

const png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";
const jpeg = Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0, 0x10]).toString("base64");
const gif = Buffer.from("GIF89a\x01\x00", "latin1").toString("base64");
const webp = Buffer.from("RIFF\x00\x00\x00\x00WEBPVP8 ", "latin1").toString("base64");

describe("imageUrlProblem", () => {
  it("accepts http(s) URLs and data URLs of PNG, JPEG, GIF and WebP images", () => {
    for (const url of [
      "https://example.com/cat.png",
      "http://localhost:8080/a?b=c",
      `data:image/png;base64,${png}`,
      `data:image/jpeg;base64,${jpeg}`,
      `data:image/gif;base64,${gif}`,
      `data:image/webp;base64,${webp}`,
    ]) {
      assert.equal(imageUrlProblem(url), undefined, url.slice(0, 40));
    }
  });

  it("says what is wrong with anything else", () => {
    assert.match(imageUrlProblem("data:image/png;base64,AAAA")!, /not a image\/png image/);
    assert.match(imageUrlProblem(`data:image/jpeg;base64,${png}`)!, /not a image\/jpeg image/);
    assert.match(imageUrlProblem("data:image/png;base64,@@@@")!, /not valid base64/);
    assert.match(imageUrlProblem("data:image/png;base64,")!, /not valid base64/);
    assert.match(imageUrlProblem("data:image/bmp;base64,AAAA")!, /not a supported image type/);
    assert.match(imageUrlProblem("data:text/plain,hello")!, /must have the form/);
    assert.match(imageUrlProblem("file:///etc/passwd")!, /'file:' URLs are not supported/);
    assert.match(imageUrlProblem("not a url")!, /expected an http\(s\) URL/);
  });
});
