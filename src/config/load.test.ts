/**
 * loadSettings: defaults < config file < environment < flags, validated once, frozen, and every
 * bad value reported as one line naming the setting.
 */
import assert from "node:assert/strict";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { ConfigError, loadSettings, parseModelFlag } from "./load.ts";
import { defaultThreads } from "./options.ts";
import { DEFAULT_MODEL } from "./schema.ts";
import { Secret } from "./secret.ts";
import { inspect } from "node:util";

let directory: string;
let fileCount = 0;

before(() => {
  directory = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-config-"));
});
after(() => {
  fs.rmSync(directory, { recursive: true, force: true });
});

/** Writes `content` (an object as JSON, or raw text) to a fresh config file and returns its path. */
function configFile(content: unknown): string {
  fileCount += 1;
  const file = path.join(directory, `config-${fileCount}.json`);
  fs.writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content));
  return file;
}

/** Asserts that `load` throws a one-line ConfigError whose message contains every `names`. */
function assertConfigError(load: () => unknown, ...names: string[]): ConfigError {
  let caught: unknown;
  try {
    load();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ConfigError, `expected a ConfigError, got ${String(caught)}`);
  assert.equal(caught.name, "ConfigError");
  assert.ok(caught.message.length > 0);
  assert.ok(!/[\r\n]/.test(caught.message), `one line: ${JSON.stringify(caught.message)}`);
  for (const name of names) assert.ok(caught.message.includes(name), `${JSON.stringify(caught.message)} names ${name}`);
  return caught;
}

describe("loadSettings", () => {
  it("uses the documented defaults when nothing is given", () => {
    const settings = loadSettings({ flags: {}, env: {} });
    assert.equal(settings.host, "127.0.0.1");
    assert.equal(settings.port, 8080);
    assert.equal(settings.data_dir, path.resolve("./data"));
    assert.equal(settings.parallel, 4);
    assert.equal(settings.threads, defaultThreads());
    assert.ok(settings.threads >= 1);
    assert.equal(settings.context_size, 4096);
    assert.equal(settings.gpu, "auto");
    assert.equal(settings.queue_size, 64);
    assert.equal(settings.shutdown_timeout, 30);
    assert.equal(settings.keep_alive_interval, 5);
    assert.equal(settings.log_level, "info");
    assert.equal(settings.body_limit, 10 * 1024 * 1024);
  });

  it("serves the default model when none is configured", () => {
    const settings = loadSettings({ flags: {}, env: {} });
    assert.deepEqual(settings.models, [DEFAULT_MODEL]);
  });

  it("takes a value from the config file over the default", () => {
    const settings = loadSettings({ flags: {}, env: {}, configFile: configFile({ port: 9001, log_level: "debug" }) });
    assert.equal(settings.port, 9001);
    assert.equal(settings.log_level, "debug");
    assert.equal(settings.host, "127.0.0.1");
  });

  it("reads the config file named by TURNPIKE_CONFIG", () => {
    const settings = loadSettings({ flags: {}, env: { TURNPIKE_CONFIG: configFile({ port: 9002 }) } });
    assert.equal(settings.port, 9002);
  });

  it("takes an environment variable over the config file", () => {
    const file = configFile({ port: 9001, parallel: 2 });
    const settings = loadSettings({ flags: {}, env: { TURNPIKE_PORT: "9100" }, configFile: file });
    assert.equal(settings.port, 9100);
    assert.equal(settings.parallel, 2);
  });

  it("takes a flag over the environment and the config file", () => {
    const file = configFile({ port: 9001, host: "10.0.0.1" });
    const settings = loadSettings({
      flags: { port: "9200" },
      env: { TURNPIKE_PORT: "9100", TURNPIKE_HOST: "0.0.0.0" },
      configFile: file,
    });
    assert.equal(settings.port, 9200);
    assert.equal(settings.host, "0.0.0.0");
  });

  it("ignores empty environment variables", () => {
    const settings = loadSettings({ flags: {}, env: { TURNPIKE_PORT: "" }, configFile: configFile({ port: 9001 }) });
    assert.equal(settings.port, 9001);
  });

  it("converts numeric environment variables and flags", () => {
    const settings = loadSettings({
      flags: { shutdown_timeout: "2.5", threads: "3" },
      env: { TURNPIKE_PARALLEL: "8", TURNPIKE_KEEP_ALIVE_INTERVAL: "0.5" },
    });
    assert.equal(settings.shutdown_timeout, 2.5);
    assert.equal(settings.threads, 3);
    assert.equal(settings.parallel, 8);
    assert.equal(settings.keep_alive_interval, 0.5);
  });

  it("takes the models from flags over those from the environment and the config file", () => {
    const file = configFile({ models: [{ id: "from-file", path: "/models/file.gguf" }] });
    const fromFile = loadSettings({ flags: {}, env: {}, configFile: file });
    assert.deepEqual(fromFile.models.map((model) => model.id), ["from-file"]);
    const fromEnv = loadSettings({ flags: {}, env: { TURNPIKE_MODELS: "/m/a.gguf, b=/m/other.gguf" }, configFile: file });
    assert.deepEqual(fromEnv.models, [
      { id: "a", path: "/m/a.gguf" },
      { id: "b", path: "/m/other.gguf" },
    ]);
    const fromFlags = loadSettings({ flags: { models: ["c=/m/c.gguf"] }, env: { TURNPIKE_MODELS: "/m/a.gguf" }, configFile: file });
    assert.deepEqual(fromFlags.models, [{ id: "c", path: "/m/c.gguf" }]);
  });

  it("resolves data_dir to an absolute path", () => {
    const settings = loadSettings({ flags: { data_dir: "relative/dir" }, env: {} });
    assert.ok(path.isAbsolute(settings.data_dir));
    assert.equal(settings.data_dir, path.resolve("relative/dir"));
  });

  it("returns frozen settings, models included", () => {
    const settings = loadSettings({ flags: { models: ["m=/models/m.gguf"] }, env: {} });
    assert.ok(Object.isFrozen(settings));
    assert.ok(Object.isFrozen(settings.models));
    assert.ok(Object.isFrozen(settings.models[0]));
    assert.throws(() => {
      (settings as { port: number }).port = 1;
    }, TypeError);
    assert.throws(() => {
      (settings.models as unknown[]).push({ id: "x", path: "/x.gguf" });
    }, TypeError);
  });

  it("does not freeze or change the default model it falls back to", () => {
    const before = structuredClone(DEFAULT_MODEL);
    const settings = loadSettings({ flags: {}, env: {} });
    assert.ok(Object.isFrozen(settings.models[0]));
    assert.notEqual(settings.models[0], DEFAULT_MODEL);
    assert.deepEqual(DEFAULT_MODEL, before);
  });

  describe("refuses", () => {
    it("a port flag that is not a number, naming the flag", () => {
      assertConfigError(() => loadSettings({ flags: { port: "abc" }, env: {} }), "--port", "abc");
    });

    it("a port variable that is not a number, naming the variable", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: { TURNPIKE_PORT: "abc" } }), "TURNPIKE_PORT", "abc");
    });

    it("a port that is not an integer", () => {
      assertConfigError(() => loadSettings({ flags: { port: "80.5" }, env: {} }), "--port");
    });

    it("a port above 65535, naming the setting, flag and variable", () => {
      assertConfigError(() => loadSettings({ flags: { port: "70000" }, env: {} }), "'port'", "--port", "TURNPIKE_PORT");
    });

    it("a port above 65535 from the config file", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ port: 70000 }) }), "'port'");
    });

    it("a port of the wrong type in the config file", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ port: "8080" }) }), "'port'");
    });

    it("parallel 0, naming the setting, flag and variable", () => {
      assertConfigError(() => loadSettings({ flags: { parallel: "0" }, env: {} }), "'parallel'", "--parallel", "TURNPIKE_PARALLEL");
    });

    it("an unknown log level", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: { TURNPIKE_LOG_LEVEL: "loud" } }), "'log_level'", "--log-level", "TURNPIKE_LOG_LEVEL");
    });

    it("an unknown key in the config file, naming the key and the file", () => {
      const file = configFile({ port: 8080, prot: 8081 });
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), "'prot'", file);
    });

    it("a config file that is not valid JSON", () => {
      const file = configFile('{\n  "port": 8080,\n}\n');
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), file, "JSON");
    });

    it("a config file that holds an array", () => {
      const file = configFile([1, 2]);
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), file);
    });

    it("a config file that does not exist", () => {
      const file = path.join(directory, "missing.json");
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), file);
    });

    it("two models with the same id", () => {
      assertConfigError(() => loadSettings({ flags: { models: ["same=/m/a.gguf", "same=/m/b.gguf"] }, env: {} }), "'models'", "same");
    });

    it("two models with the same id from the file name", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: { TURNPIKE_MODELS: "/one/m.gguf,/two/m.gguf" } }), "'models'", "'m'");
    });

    it("a model entry with both path and hf", () => {
      const file = configFile({ models: [{ id: "m", path: "/m.gguf", hf: "hf:owner/repo/m.gguf" }] });
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), "models[0]", "path", "hf");
    });

    it("a model entry with neither path nor hf", () => {
      const file = configFile({ models: [{ id: "m" }] });
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), "models[0]");
    });

    it("a GGUF model declaring image input, which the embedded engine cannot read", () => {
      const file = configFile({ models: [{ id: "m", path: "/m.gguf", input_modalities: ["text", "image"] }] });
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: file }), "models[0].input_modalities", "mmproj");
    });
  });
});

describe("parseModelFlag", () => {
  it("reads id=path", () => {
    assert.deepEqual(parseModelFlag("tiny=/models/tiny-q4.gguf"), { id: "tiny", path: "/models/tiny-q4.gguf" });
  });

  it("names a plain path after its file, without .gguf", () => {
    assert.deepEqual(parseModelFlag("/models/stories260K.gguf"), { id: "stories260K", path: "/models/stories260K.gguf" });
    assert.deepEqual(parseModelFlag("./llama.Q4_K_M.GGUF"), { id: "llama.Q4_K_M", path: "./llama.Q4_K_M.GGUF" });
  });

  it("reads hf:owner/repo/file.gguf as an hf source named after the file", () => {
    assert.deepEqual(parseModelFlag("hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf"), {
      id: "qwen2.5-0.5b-instruct-q4_k_m",
      hf: "hf:Qwen/Qwen2.5-0.5B-Instruct-GGUF/qwen2.5-0.5b-instruct-q4_k_m.gguf",
    });
  });

  it("reads id=hf:owner/repo/file.gguf", () => {
    assert.deepEqual(parseModelFlag("qwen=hf:Qwen/repo/file.gguf"), { id: "qwen", hf: "hf:Qwen/repo/file.gguf" });
  });

  it("reads an https URL as a remote source", () => {
    assert.deepEqual(parseModelFlag("https://example.com/models/small.gguf"), { id: "small", hf: "https://example.com/models/small.gguf" });
  });

  it("trims surrounding whitespace", () => {
    assert.deepEqual(parseModelFlag("  m=/models/m.gguf "), { id: "m", path: "/models/m.gguf" });
  });

  it("refuses an empty value with a ConfigError", () => {
    assert.throws(() => parseModelFlag("   "), ConfigError);
  });
});

describe("upstream models", () => {
  it("reads --upstream id=url[,url] as a pool with the documented defaults, beside embedded models", () => {
    const settings = loadSettings({ flags: { models: ["local=./a.gguf"], upstreams: ["qwen=http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1"] }, env: {} });
    assert.deepEqual(
      settings.models.map((model) => model.id),
      ["local", "qwen"],
    );
    const upstream = settings.models[1]!.upstream!;
    assert.deepEqual(upstream.urls, ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]);
    assert.equal(upstream.kind, undefined, "detected by probing");
    assert.equal(upstream.max_in_flight, 64);
    assert.equal(upstream.max_attempts, 3);
  });

  it("serves only the upstream models when no --model is given (no default download)", () => {
    const settings = loadSettings({ flags: {}, env: { TURNPIKE_UPSTREAMS: "a=http://127.0.0.1:1/v1; b=http://127.0.0.1:2/v1" } });
    assert.deepEqual(
      settings.models.map((model) => model.id),
      ["a", "b"],
    );
  });

  it("reads the issue's config entry: kind, urls, model, api_key_env, max_in_flight, context length, image input, cached price", () => {
    const settings = loadSettings({
      flags: {},
      env: {},
      configFile: configFile({
        models: [
          {
            id: "llama-3.1-8b",
            upstream: { kind: "vllm", urls: ["http://10.0.0.5:8000/v1", "http://10.0.0.6:8000/v1"], model: "meta-llama/Llama-3.1-8B-Instruct", api_key_env: "VLLM_API_KEY", max_in_flight: 64 },
            context_length: 131072,
            input_modalities: ["text", "image"],
            pricing: { prompt: 100, cached_prompt: 25, completion: 300 },
          },
        ],
      }),
    });
    const [model] = settings.models;
    assert.equal(model!.upstream!.kind, "vllm");
    assert.equal(model!.context_length, 131072);
    assert.deepEqual(model!.input_modalities, ["text", "image"]);
  });

  describe("refuses", () => {
    it("an --upstream without an id", () => {
      assertConfigError(() => loadSettings({ flags: { upstreams: ["http://127.0.0.1:8000/v1"] }, env: {} }), "http://127.0.0.1:8000/v1");
    });

    it("an upstream URL that is not http(s)", () => {
      assertConfigError(() => loadSettings({ flags: { upstreams: ["x=ftp://host/v1"] }, env: {} }), "upstreams");
    });

    it("an unknown kind", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ models: [{ id: "x", upstream: { kind: "tgi", urls: ["http://h/v1"] } }] }) }), "kind");
    });

    it("an entry with both a path and an upstream", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ models: [{ id: "x", path: "./a.gguf", upstream: { urls: ["http://h/v1"] } }] }) }), "exactly one");
    });

    it("image input or vendor fields for an embedded model", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ models: [{ id: "x", path: "./a.gguf", input_modalities: ["text", "image"] }] }) }), "image");
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ models: [{ id: "x", path: "./a.gguf", vendor_fields: ["top_k"] }] }) }), "vendor");
    });

    it("the same id for an embedded and an upstream model", () => {
      assertConfigError(() => loadSettings({ flags: { models: ["x=./a.gguf"], upstreams: ["x=http://h/v1"] }, env: {} }), "'x'", "twice");
    });
  });
});

describe("settings that used to be read from the environment elsewhere", () => {
  it("defaults: no config file, no Stripe keys, no HF token, the public hub, no credit value", () => {
    const settings = loadSettings({ flags: {}, env: {} });
    assert.equal(settings.config, "");
    assert.equal(settings.stripe_secret_key, null);
    assert.equal(settings.stripe_webhook_secret, null);
    assert.equal(settings.hf_token, null);
    assert.equal(settings.hf_endpoint, "https://huggingface.co");
    assert.equal(settings.credit_value, null);
    assert.equal(settings.public_url, "");
    assert.equal(settings.trust_proxy, "");
    assert.equal(settings.database_url, "");
    assert.deepEqual(settings.upstream_api_keys, {});
  });

  it("reads the Stripe keys and the HF token from their variables, as secrets", () => {
    const settings = loadSettings({ flags: {}, env: { STRIPE_SECRET_KEY: "sk_test_1", STRIPE_WEBHOOK_SECRET: "whsec_1", HF_TOKEN: "hf_1", HF_ENDPOINT: "https://mirror.example/" } });
    assert.ok(settings.stripe_secret_key instanceof Secret);
    assert.equal(settings.stripe_secret_key.reveal(), "sk_test_1");
    assert.equal(settings.stripe_webhook_secret?.reveal(), "whsec_1");
    assert.equal(settings.hf_token?.reveal(), "hf_1");
    assert.equal(settings.hf_endpoint, "https://mirror.example", "without its trailing slash");
  });

  it("takes a secret's flag over its variable, and its variable over the file", () => {
    const file = configFile({ stripe_secret_key: "sk_file", hf_token: "hf_file" });
    const settings = loadSettings({ flags: { stripe_secret_key: "sk_flag" }, env: { STRIPE_SECRET_KEY: "sk_env", HF_TOKEN: "hf_env" }, configFile: file });
    assert.equal(settings.stripe_secret_key?.reveal(), "sk_flag");
    assert.equal(settings.hf_token?.reveal(), "hf_env");
    assert.equal(loadSettings({ flags: {}, env: {}, configFile: file }).hf_token?.reveal(), "hf_file");
  });

  it("never writes a secret out: JSON, inspect and template strings show [secret]", () => {
    const settings = loadSettings({ flags: {}, env: { STRIPE_SECRET_KEY: "sk_live_do_not_print", STRIPE_WEBHOOK_SECRET: "whsec_do_not_print", HF_TOKEN: "hf_do_not_print" } });
    for (const text of [JSON.stringify(settings), inspect(settings, { depth: 5 }), `${settings.stripe_secret_key}`]) {
      assert.ok(!/do_not_print/.test(text), text);
    }
    assert.match(JSON.stringify(settings), /"stripe_secret_key":"\[secret\]"/);
  });

  it("reads public_url, trust_proxy and database_url from flag, variable or file, the flag winning", () => {
    const file = configFile({ public_url: "https://file.example", trust_proxy: "2", database_url: "postgres://file/db" });
    const fromFile = loadSettings({ flags: {}, env: {}, configFile: file });
    assert.equal(fromFile.public_url, "https://file.example");
    assert.equal(fromFile.trust_proxy, "2");
    assert.equal(fromFile.database_url, "postgres://file/db");
    const fromEnv = loadSettings({ flags: {}, env: { TURNPIKE_PUBLIC_URL: "https://env.example", TURNPIKE_TRUST_PROXY: "1", TURNPIKE_DATABASE_URL: "postgres://env/db" }, configFile: file });
    assert.equal(fromEnv.public_url, "https://env.example");
    assert.equal(fromEnv.trust_proxy, "1");
    assert.equal(fromEnv.database_url, "postgres://env/db");
    const fromFlag = loadSettings({ flags: { public_url: "https://flag.example", trust_proxy: "10.0.0.1" }, env: { TURNPIKE_PUBLIC_URL: "https://env.example" }, configFile: file });
    assert.equal(fromFlag.public_url, "https://flag.example");
    assert.equal(fromFlag.trust_proxy, "10.0.0.1");
  });

  it("names the config file it read: --config over TURNPIKE_CONFIG", () => {
    const first = configFile({ port: 9301 });
    const second = configFile({ port: 9302 });
    assert.equal(loadSettings({ flags: {}, env: { TURNPIKE_CONFIG: first } }).config, first);
    const flagged = loadSettings({ flags: { config: second }, env: { TURNPIKE_CONFIG: first } });
    assert.equal(flagged.config, second);
    assert.equal(flagged.port, 9302);
  });

  it("refuses 'config' inside the config file", () => {
    assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ config: "other.json" }) }), "'config'");
  });

  it("reads the upstream API keys the entries name, and only those", () => {
    const file = configFile({ models: [{ id: "u", upstream: { urls: ["http://127.0.0.1:1/v1"], api_key_env: "MY_UPSTREAM_KEY" } }] });
    const settings = loadSettings({ flags: {}, env: { MY_UPSTREAM_KEY: "up-secret", OTHER: "x" }, configFile: file });
    assert.deepEqual(Object.keys(settings.upstream_api_keys), ["MY_UPSTREAM_KEY"]);
    assert.equal(settings.upstream_api_keys.MY_UPSTREAM_KEY?.reveal(), "up-secret");
    assert.ok(!JSON.stringify(settings).includes("up-secret"));
    assert.deepEqual(loadSettings({ flags: {}, env: {}, configFile: file }).upstream_api_keys, {}, "unset: the engine says so at start");
  });

  it("validates the defaults too: the default of every setting passes its own schema", () => {
    assert.doesNotThrow(() => loadSettings({ flags: {}, env: {} }));
  });
});

describe("credit_value", () => {
  it("reads the file's object form", () => {
    const settings = loadSettings({ flags: {}, env: {}, configFile: configFile({ credit_value: { currency: "usd", per_million_credits: 1 } }) });
    assert.deepEqual(settings.credit_value, { currency: "usd", per_million_credits: "1" });
  });

  it("reads the file's decimal string exactly, and normalises the currency and zeros", () => {
    const settings = loadSettings({ flags: {}, env: {}, configFile: configFile({ credit_value: { currency: "EUR", per_million_credits: "0.1500" } }) });
    assert.deepEqual(settings.credit_value, { currency: "eur", per_million_credits: "0.15" });
  });

  it("reads currency:amount from the variable and the flag, the flag winning over the variable and the file", () => {
    const file = configFile({ credit_value: "usd:3" });
    assert.deepEqual(loadSettings({ flags: {}, env: {}, configFile: file }).credit_value, { currency: "usd", per_million_credits: "3" });
    assert.deepEqual(loadSettings({ flags: {}, env: { TURNPIKE_CREDIT_VALUE: "usd:2" }, configFile: file }).credit_value, { currency: "usd", per_million_credits: "2" });
    assert.deepEqual(loadSettings({ flags: { credit_value: "gbp:0.8" }, env: { TURNPIKE_CREDIT_VALUE: "usd:2" }, configFile: file }).credit_value, { currency: "gbp", per_million_credits: "0.8" });
  });

  it("is unset by an empty variable or null in the file", () => {
    assert.equal(loadSettings({ flags: {}, env: { TURNPIKE_CREDIT_VALUE: "" } }).credit_value, null);
    assert.equal(loadSettings({ flags: {}, env: {}, configFile: configFile({ credit_value: null }) }).credit_value, null);
  });

  describe("refuses", () => {
    it("a currency that is not a three-letter code, naming the setting, flag and variable", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: { TURNPIKE_CREDIT_VALUE: "dollars:1" } }), "credit_value", "--credit-value", "TURNPIKE_CREDIT_VALUE", "ISO 4217");
    });

    it("an amount that is missing, negative, zero or not a decimal", () => {
      for (const value of ["usd", "usd:", "usd:-1", "usd:0", "usd:0.000", "usd:1e-6", "usd:abc"]) {
        assertConfigError(() => loadSettings({ flags: { credit_value: value }, env: {} }), "credit_value");
      }
    });

    it("unknown fields in the object form", () => {
      assertConfigError(() => loadSettings({ flags: {}, env: {}, configFile: configFile({ credit_value: { currency: "usd", per_million_credits: 1, per_credit: 2 } }) }), "credit_value");
    });
  });
});
