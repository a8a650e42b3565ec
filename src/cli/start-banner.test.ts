import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { redactedUrl, renderStartBanner, type StartFacts } from "./start-banner.ts";

const facts: StartFacts = {
  version: "1.2.3",
  baseUrl: "http://127.0.0.1:8080",
  consoleBuilt: true,
  models: [
    { id: "stories", status: { state: "ready" } },
    { id: "qwen2.5-0.5b-instruct", status: { state: "downloading", progress: 0.426 } },
    { id: "broken", status: { state: "unavailable", detail: "no file at ./models/broken.gguf" } },
    { id: "big", status: { state: "loading" } },
  ],
  dataDir: "/srv/turnpike/data",
  databaseUrl: "",
  redisUrl: "",
  setupCode: "ABCD-EFGH-JKMN-PQRS",
  command: "turnpike",
  storeFlags: "",
};

const ESCAPE = "\u001b[";

describe("the start banner", () => {
  it("shows the version, the API and console URLs, and where the data lives", () => {
    const text = renderStartBanner(facts, { color: false });
    assert.match(text, /Turnpike 1\.2\.3 is listening/);
    assert.match(text, /^ {2}API {8}http:\/\/127\.0\.0\.1:8080\/v1$/m);
    assert.match(text, /^ {2}Console {4}http:\/\/127\.0\.0\.1:8080\/$/m);
    assert.match(text, /^ {2}Data {7}\/srv\/turnpike\/data \(SQLite database and downloaded models\)$/m);
    assert.doesNotMatch(text, /Redis|Database|Metrics/, "nothing about what is not set");
  });

  it("lists each model with its state: ready, download progress, the reason it is unavailable", () => {
    const text = renderStartBanner(facts, { color: false });
    assert.match(text, /Models {5}stories {16}ready$/m);
    assert.match(text, /qwen2\.5-0\.5b-instruct {2}downloading 42%$/m);
    assert.match(text, /broken {17}unavailable: no file at \.\/models\/broken\.gguf$/m);
    assert.match(text, /big {20}loading$/m);
    assert.match(text, /each change of state is logged below/, "says where the rest of the story is told");
  });

  it("draws the setup code and the sign-up URL in a closed box of even width", () => {
    const lines = renderStartBanner(facts, { color: false }).split("\n");
    const top = lines.findIndex((line) => line.includes("┏"));
    const bottom = lines.findIndex((line) => line.includes("┗"));
    assert.ok(top > 0 && bottom > top, "a box is drawn");
    const box = lines.slice(top, bottom + 1);
    assert.equal(new Set(box.map((line) => line.length)).size, 1, `every line of the box is as wide:\n${box.join("\n")}`);
    for (const line of box.slice(1, -1)) assert.match(line, /^ {2}┃.*┃$/);
    const inside = box.join("\n");
    assert.match(inside, /ABCD-EFGH-JKMN-PQRS/);
    assert.match(inside, /http:\/\/127\.0\.0\.1:8080\/signup/);
    assert.match(inside, /stops working once an admin exists/);
  });

  it("gives the next step with commands that exist, pointed at the same data", () => {
    const text = renderStartBanner({ ...facts, command: "npx turnpike", storeFlags: "--data-dir /srv/turnpike/data" }, { color: false });
    assert.match(text, /Next: sign up in the console with the code above/);
    assert.match(text, /npx turnpike accounts create --admin --email you@example\.com --data-dir \/srv\/turnpike\/data$/m);
    assert.match(text, /npx turnpike keys create --name laptop --data-dir \/srv\/turnpike\/data$/m);
  });

  it("once an admin exists: no box, and the next step is an API key", () => {
    const text = renderStartBanner({ ...facts, setupCode: null }, { color: false });
    assert.doesNotMatch(text, /┏|setup code|accounts create/);
    assert.match(text, /Next: create an API key in the console \(API Keys\) or with:\n\s+turnpike keys create --name laptop\n/);
  });

  it("says so when the console is not built", () => {
    const text = renderStartBanner({ ...facts, consoleBuilt: false }, { color: false });
    assert.match(text, /Console {4}http:\/\/127\.0\.0\.1:8080\/ \(not built yet: run npm run build:console\)/);
  });

  it("shows PostgreSQL and Redis without their passwords", () => {
    const text = renderStartBanner(
      {
        ...facts,
        databaseUrl: "postgresql://turnpike:s3cret-pw@db.internal:5432/turnpike?sslmode=require&password=other-s3cret",
        redisUrl: "rediss://:redis-s3cret@cache:6380/2",
      },
      { color: false },
    );
    assert.ok(!text.includes("s3cret"), text);
    assert.match(text, /Database {3}postgresql:\/\/turnpike:\*\*\*\*@db\.internal:5432\/turnpike\?… \(PostgreSQL\)$/m);
    assert.match(text, /Data {7}\/srv\/turnpike\/data \(downloaded models\)$/m);
    assert.match(text, /Redis {6}rediss:\/\/:\*\*\*\*@cache:6380\/2 \(rate limits shared between nodes\)$/m);
  });

  it("redacts a URL it cannot parse entirely", () => {
    assert.equal(redactedUrl("postgres://user:pa ss@[bad"), "(set)");
    assert.equal(redactedUrl("redis://cache:6379"), "redis://cache:6379");
  });

  it("colors only when asked", () => {
    assert.ok(!renderStartBanner(facts, { color: false }).includes(ESCAPE));
    const colored = renderStartBanner(facts, { color: true });
    assert.ok(colored.includes(ESCAPE));
    assert.match(colored, /ABCD-EFGH-JKMN-PQRS/);
  });
});
