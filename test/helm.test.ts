/**
 * The Helm chart (deploy/helm/turnpike): rendered with scripts/helm-template.sh (what `helm
 * template` does; no helm binary is packaged for Debian or npm) for several value sets, every
 * rendered object validated against the Kubernetes OpenAPI schemas of `kubernetes-models`
 * (v5.1.0: Kubernetes 1.36), unknown fields refused as `kubectl apply --validate=strict` refuses
 * them, the values checked against values.schema.json, and the chart's promises pinned: the
 * migration hook Job, serving pods that never migrate, probes, the grace period arithmetic,
 * secrets by reference only, the security context, the PDB and the HPA.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { Ajv } from "ajv";
import { parseAllDocuments } from "yaml";
import { loadSettings } from "../src/config/load.ts";
import { serveOptionList } from "../src/config/options.ts";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const chart = path.join(root, "deploy/helm/turnpike");
const renderer = path.join(root, "scripts/helm-template.sh");
const workDirectory = fs.mkdtempSync(path.join(os.tmpdir(), "turnpike-helm-"));

type KubernetesObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  spec?: any;
  [field: string]: unknown;
};
type EnvVar = { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string } } };
type Container = {
  name: string;
  args?: string[];
  command?: string[];
  env?: EnvVar[];
  securityContext?: any;
  lifecycle?: any;
  readinessProbe?: any;
  livenessProbe?: any;
  ports?: Array<{ name: string; containerPort: number }>;
};

type Rendered = { ok: true; objects: KubernetesObject[]; text: string } | { ok: false; error: string };

const valuesSchema = JSON.parse(fs.readFileSync(path.join(chart, "values.schema.json"), "utf8"));
const validateValues = new Ajv({ allErrors: true, strict: false }).compile(valuesSchema);

let renderCount = 0;

/** Renders the chart with these values (and flags), the merged values checked against values.schema.json. */
function render(values: object, flags: string[] = []): Rendered {
  renderCount++;
  const valuesFile = path.join(workDirectory, `values-${renderCount}.json`);
  const mergedFile = path.join(workDirectory, `merged-${renderCount}.json`);
  fs.writeFileSync(valuesFile, JSON.stringify(values));
  const result = spawnSync(renderer, ["tp", chart, "-n", "ai", "-f", valuesFile, "--values-json", mergedFile, ...flags], { encoding: "utf8" });
  if (result.status !== 0) return { ok: false, error: result.stderr };
  const merged = JSON.parse(fs.readFileSync(mergedFile, "utf8"));
  if (!validateValues(merged)) return { ok: false, error: `values.schema.json: ${JSON.stringify(validateValues.errors)}` };
  const objects = parseAllDocuments(result.stdout).map((document) => {
    assert.deepEqual(document.errors, [], "the rendered YAML parses");
    return document.toJS() as KubernetesObject;
  });
  return { ok: true, objects, text: result.stdout };
}

function renderOk(values: object, flags: string[] = []): { objects: KubernetesObject[]; text: string } {
  const rendered = render(values, flags);
  if (!rendered.ok) assert.fail(`rendering failed: ${rendered.error}`);
  return rendered;
}

function find(objects: KubernetesObject[], kind: string, name?: string): KubernetesObject {
  const found = objects.filter((object) => object.kind === kind && (name === undefined || object.metadata.name === name));
  assert.equal(found.length, 1, `exactly one ${kind}${name === undefined ? "" : ` ${name}`} (found ${found.length})`);
  return found[0]!;
}

function envOf(container: Container): Map<string, EnvVar> {
  return new Map((container.env ?? []).map((variable) => [variable.name, variable]));
}

function servingContainer(deployment: KubernetesObject): Container {
  const container = (deployment.spec.template.spec.containers as Container[]).find((candidate) => candidate.name === "turnpike");
  assert.ok(container, "the Deployment has the turnpike container");
  return container;
}

/** The Kubernetes model class for an apiVersion and kind; an unknown one fails. */
async function modelClass(apiVersion: string, kind: string): Promise<new (data: object) => { validate(): void }> {
  let module: Record<string, unknown>;
  try {
    module = await import(`kubernetes-models/${apiVersion}/${kind}`);
  } catch (error) {
    assert.fail(`no Kubernetes schema for ${apiVersion} ${kind} (kubernetes-models): ${String(error)}`);
  }
  const model = module[kind];
  assert.equal(typeof model, "function", `kubernetes-models/${apiVersion}/${kind} exports ${kind}`);
  return model as new (data: object) => { validate(): void };
}

function validationErrors(Model: new (data: object) => { validate(): void }, object: object): string | null {
  try {
    new Model(object).validate();
    return null;
  } catch (error) {
    return String(error);
  }
}

/**
 * The fields the schema does not know. The compiled schemas accept unknown properties (the API
 * server's strict field validation refuses them), so each field is replaced in turn by a value of
 * a type it cannot have: a field the schema knows is then an error at its own path; one it does
 * not know passes.
 */
function unknownFields(Model: new (data: object) => { validate(): void }, object: KubernetesObject): string[] {
  const unknown: string[] = [];
  const visit = (node: unknown, pointer: string[]) => {
    if (node === null || typeof node !== "object") return;
    const entries = Array.isArray(node) ? node.map((item, index) => [String(index), item] as const) : Object.entries(node);
    for (const [key, value] of entries) {
      const fieldPath = [...pointer, key];
      if (!Array.isArray(node)) {
        const poisoned = structuredClone(object) as any;
        let parent = poisoned;
        for (const segment of pointer) parent = parent[segment];
        parent[key] = typeof value === "boolean" ? "not-a-boolean" : true;
        const errors = validationErrors(Model, poisoned) ?? "";
        const at = `data/${fieldPath.map((segment) => segment.replaceAll("~", "~0").replaceAll("/", "~1")).join("/")} `;
        if (!errors.includes(at)) {
          unknown.push(fieldPath.join("."));
          continue;
        }
      }
      visit(value, fieldPath);
    }
  };
  visit(object, []);
  return unknown.filter((field) => field !== "apiVersion" && field !== "kind");
}

/** Validates every object against its Kubernetes schema, unknown fields included. */
async function assertValidKubernetes(objects: KubernetesObject[]): Promise<void> {
  assert.ok(objects.length > 0, "something was rendered");
  for (const object of objects) {
    assert.ok(object.apiVersion && object.kind, `an object without apiVersion/kind: ${JSON.stringify(object).slice(0, 200)}`);
    const Model = await modelClass(object.apiVersion, object.kind);
    const label = `${object.kind} ${object.metadata?.name}`;
    assert.equal(validationErrors(Model, object), null, `${label} is valid`);
    assert.deepEqual(unknownFields(Model, object), [], `${label} has no field unknown to Kubernetes`);
  }
}

function assertLockedDown(container: Container, podSecurityContext: any): void {
  assert.equal(container.securityContext?.runAsNonRoot, true, `${container.name}: runAsNonRoot`);
  assert.equal(container.securityContext?.readOnlyRootFilesystem, true, `${container.name}: readOnlyRootFilesystem`);
  assert.equal(container.securityContext?.allowPrivilegeEscalation, false, `${container.name}: allowPrivilegeEscalation false`);
  assert.deepEqual(container.securityContext?.capabilities?.drop, ["ALL"], `${container.name}: drops ALL capabilities`);
  assert.equal(podSecurityContext.runAsNonRoot, true);
  assert.equal(podSecurityContext.runAsUser, 1000);
  assert.equal(podSecurityContext.fsGroup, 1000);
}

const SECRET_VARIABLES = ["TURNPIKE_DATABASE_URL", "TURNPIKE_REDIS_URL", "STRIPE_SECRET_KEY", "STRIPE_WEBHOOK_SECRET", "HF_TOKEN", "TURNPIKE_METRICS_TOKEN"];

/** Three pods on PostgreSQL and Redis, autoscaled, behind an ingress, selling by card, with a keyed upstream. */
const clusterValues = {
  replicaCount: 3,
  publicUrl: "https://ai.example.com",
  trustProxy: "1",
  persistence: { enabled: false },
  secrets: {
    databaseUrl: { name: "turnpike-postgres", key: "url" },
    redisUrl: { name: "turnpike-redis", key: "url" },
    stripeSecretKey: { name: "turnpike-stripe", key: "secret-key" },
    stripeWebhookSecret: { name: "turnpike-stripe", key: "webhook-secret" },
    metricsToken: { name: "turnpike-metrics", key: "token" },
    upstreamKeys: [{ env: "VLLM_API_KEY", name: "vllm", key: "api-key" }],
  },
  config: {
    models: [{ id: "llama", upstream: { kind: "vllm", urls: ["http://vllm-0.vllm:8000/v1"], api_key_env: "VLLM_API_KEY" }, pricing: { prompt: 100, completion: 300 } }],
    plans: [{ id: "pro", name: "Pro", price: { amount: 2000, currency: "usd" }, credit: 1000000000, days: 30 }],
  },
  env: { TURNPIKE_SIGNUP: "closed", TURNPIKE_PARALLEL: 8, TURNPIKE_BODY_LIMIT: 10485760 },
  autoscaling: { enabled: true, minReplicas: 3, maxReplicas: 12, targetCPUUtilizationPercentage: 80 },
  ingress: {
    enabled: true,
    className: "nginx",
    annotations: { "nginx.ingress.kubernetes.io/proxy-buffering": "off" },
    hosts: [{ host: "ai.example.com", paths: [{ path: "/", pathType: "Prefix" }] }],
    tls: [{ secretName: "ai-example-com-tls", hosts: ["ai.example.com"] }],
  },
};

/** One pod on SQLite in a PersistentVolumeClaim, GGUF files from another claim. */
const singleNodeValues = {
  publicUrl: "https://ai.example.com",
  models: ["qwen=/models/qwen2.5-0.5b-instruct-q4_k_m.gguf"],
  modelVolume: { source: { persistentVolumeClaim: { claimName: "gguf-models", readOnly: true } } },
  persistence: { size: "5Gi", storageClass: "fast-ssd" },
};

/** One pod in front of upstream servers only. */
const upstreamOnlyValues = {
  upstreams: ["qwen=http://vllm-0.vllm:8000/v1,http://vllm-1.vllm:8000/v1", "small=http://llama-server:8080/v1"],
  persistence: { size: "1Gi" },
};

/** GGUF files from an OCI image volume (Kubernetes 1.31+). */
const imageVolumeValues = {
  models: ["qwen=/models/qwen.gguf"],
  modelVolume: { source: { image: { reference: "registry.example.com/models/qwen:2.5", pullPolicy: "IfNotPresent" } } },
};

after(() => fs.rmSync(workDirectory, { recursive: true, force: true }));

before(() => {
  const build = spawnSync(renderer, ["--build"], { encoding: "utf8" });
  if (build.error !== undefined || build.status !== 0) {
    assert.fail(
      `scripts/helm-template.sh could not build the chart renderer (${build.error?.message ?? build.stderr.trim()}). It needs Debian's Go and libraries: ` +
        "apt-get install golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v3-dev (.ci/run installs them)",
    );
  }
});

describe("the Helm chart renders valid Kubernetes objects", () => {
  const cases: Array<[string, object, string[]]> = [
    ["default values", {}, []],
    ["one node on SQLite with a PersistentVolumeClaim and models from a claim", singleNodeValues, []],
    ["three nodes on PostgreSQL and Redis with an HPA and an ingress", clusterValues, []],
    ["three nodes on Kubernetes 1.29 (preStop as exec sleep)", clusterValues, ["--kube-version", "v1.29.0"]],
    ["three nodes on Kubernetes 1.26 (no unhealthyPodEvictionPolicy)", clusterValues, ["--kube-version", "v1.26.3"]],
    ["upstreams only", upstreamOnlyValues, []],
    ["models from an image volume", imageVolumeValues, []],
    ["an upgrade", clusterValues, ["--is-upgrade"]],
  ];
  for (const [name, values, flags] of cases) {
    it(`${name}: every object passes the Kubernetes 1.36 schemas`, async () => {
      await assertValidKubernetes(renderOk(values, flags).objects);
    });
  }

  it("NOTES.txt renders for one node and for several", () => {
    for (const values of [{}, clusterValues]) {
      const valuesFile = path.join(workDirectory, `notes-${++renderCount}.json`);
      fs.writeFileSync(valuesFile, JSON.stringify(values));
      const result = spawnSync(renderer, ["tp", chart, "-n", "ai", "-f", valuesFile, "--notes"], { encoding: "utf8" });
      assert.equal(result.status, 0, result.stderr);
      const notes = result.stdout.slice(result.stdout.indexOf("\nNOTES:\n"));
      assert.match(notes, /deployed as tp-turnpike in ai/);
      assert.match(notes, /http:\/\/tp-turnpike\.ai\.svc:80/);
      assert.doesNotMatch(notes, /<no value>|%!/);
    }
  });

  it("refuses a field Kubernetes does not know (the strict check itself works)", async () => {
    const deployment = structuredClone(find(renderOk({}).objects, "Deployment"));
    (deployment.spec.template.spec.containers[0] as any).readinesProbe = { httpGet: { path: "/ready", port: "http" } };
    const Model = await modelClass("apps/v1", "Deployment");
    assert.deepEqual(unknownFields(Model, deployment), ["spec.template.spec.containers.0.readinesProbe"]);
  });

  it("refuses a kind it has no schema for", async () => {
    await assert.rejects(assertValidKubernetes([{ apiVersion: "monitoring.coreos.com/v1", kind: "ServiceMonitor", metadata: { name: "x" } }]), /no Kubernetes schema/);
  });

  it("checks values against values.schema.json", () => {
    const rendered = render({ replicas: 3 });
    assert.equal(rendered.ok, false);
    assert.match((rendered as { error: string }).error, /values\.schema\.json.*additionalProperties/);
    const badUrl = render({ publicUrl: "ai.example.com" });
    assert.equal(badUrl.ok, false);
  });
});

describe("migrations", () => {
  it("run in a pre-install,pre-upgrade hook Job that waits for PostgreSQL and fails the release on error", () => {
    const { objects } = renderOk(clusterValues);
    const job = find(objects, "Job", "tp-turnpike-migrate");
    assert.equal(job.metadata.annotations?.["helm.sh/hook"], "pre-install,pre-upgrade");
    assert.equal(job.metadata.annotations?.["helm.sh/hook-delete-policy"], "before-hook-creation,hook-succeeded");
    assert.equal(job.spec.backoffLimit, 1);
    assert.ok(job.spec.activeDeadlineSeconds > 120, "the Job's deadline is longer than its wait");
    const pod = job.spec.template.spec;
    assert.equal(pod.restartPolicy, "Never");
    assert.equal(pod.serviceAccountName, undefined, "not the chart's ServiceAccount, which a pre-install hook runs before");
    const [container] = pod.containers as Container[];
    assert.deepEqual(container!.args, ["migrate", "--wait", "120"]);
    assert.equal(container!.command, undefined, "the image's entrypoint runs it");
    assert.deepEqual(envOf(container!).get("TURNPIKE_DATABASE_URL")?.valueFrom?.secretKeyRef, { name: "turnpike-postgres", key: "url" });
    assertLockedDown(container!, pod.securityContext);
  });

  it("never run in the serving pods on PostgreSQL", () => {
    const deployment = find(renderOk(clusterValues).objects, "Deployment");
    const pod = deployment.spec.template.spec;
    assert.equal(pod.initContainers, undefined);
    for (const container of pod.containers as Container[]) {
      assert.ok(![...(container.command ?? []), ...(container.args ?? [])].includes("migrate"), `${container.name} does not migrate`);
      assert.equal(envOf(container).get("TURNPIKE_AUTO_MIGRATE")?.value, "false");
    }
    assert.deepEqual(servingContainer(deployment).args, ["serve"]);
  });

  it("on SQLite run in the pod's init container (the database file is the pod's volume), the server still never migrates", () => {
    const { objects } = renderOk(singleNodeValues);
    assert.equal(objects.filter((object) => object.kind === "Job").length, 0, "no hook Job: it could not reach the pod's volume");
    const deployment = find(objects, "Deployment");
    const pod = deployment.spec.template.spec;
    const [init] = pod.initContainers as Container[];
    assert.deepEqual(init!.args, ["migrate", "--wait", "120"]);
    assertLockedDown(init!, pod.securityContext);
    assert.deepEqual(servingContainer(deployment).args, ["serve"]);
    assert.equal(envOf(servingContainer(deployment)).get("TURNPIKE_AUTO_MIGRATE")?.value, "false");
    assert.equal(deployment.spec.strategy.type, "Recreate", "two processes never share the SQLite file");
  });

  it("the Job's deadline must be longer than its wait", () => {
    const rendered = render({ ...clusterValues, migrations: { waitSeconds: 600, activeDeadlineSeconds: 300 } });
    assert.equal(rendered.ok, false);
    assert.match((rendered as { error: string }).error, /activeDeadlineSeconds must be more than migrations\.waitSeconds/);
  });
});

describe("serving pods", () => {
  it("are ready on /ready and alive on /health, listen on 8080 on every interface and keep state in /data", () => {
    const deployment = find(renderOk({}).objects, "Deployment");
    const container = servingContainer(deployment);
    assert.deepEqual(container.readinessProbe.httpGet, { path: "/ready", port: "http" });
    assert.deepEqual(container.livenessProbe.httpGet, { path: "/health", port: "http" });
    assert.deepEqual(container.ports?.find((port) => port.name === "http")?.containerPort, 8080);
    const env = envOf(container);
    assert.equal(env.get("TURNPIKE_HOST")?.value, "0.0.0.0");
    assert.equal(env.get("TURNPIKE_PORT")?.value, "8080");
    assert.equal(env.get("TURNPIKE_DATA_DIR")?.value, "/data");
    assert.equal(env.get("TURNPIKE_ALLOWED_HOSTS")?.value, "tp-turnpike,tp-turnpike.ai,tp-turnpike.ai.svc,tp-turnpike.ai.svc.cluster.local", "in-cluster clients call it by the Service's names");
    assert.equal((container as any).volumeMounts.find((mount: { mountPath: string }) => mount.mountPath === "/data").name, "data");
    assertLockedDown(container, deployment.spec.template.spec.securityContext);
    assert.equal(deployment.spec.template.spec.automountServiceAccountToken, false);
  });

  it("get no service link variables (a Service named turnpike would set TURNPIKE_PORT=tcp://…), nor does the Job", () => {
    const { objects } = renderOk({ ...clusterValues, fullnameOverride: "turnpike" });
    assert.equal(find(objects, "Deployment").spec.template.spec.enableServiceLinks, false);
    assert.equal(find(objects, "Job").spec.template.spec.enableServiceLinks, false);
  });

  it("get a grace period of preStop sleep + drain delay + shutdown timeout + margin, and pass the two delays to the server", () => {
    const byDefault = find(renderOk({}).objects, "Deployment");
    assert.equal(byDefault.spec.template.spec.terminationGracePeriodSeconds, 5 + 5 + 30 + 10);
    assert.deepEqual(servingContainer(byDefault).lifecycle, { preStop: { sleep: { seconds: 5 } } });

    const drain = { preStopSleepSeconds: 10, drainDelaySeconds: 2.5, shutdownTimeoutSeconds: 1200000, marginSeconds: 7.25 };
    const deployment = find(renderOk({ drain }).objects, "Deployment");
    assert.equal(deployment.spec.template.spec.terminationGracePeriodSeconds, 1200020, "10 + 2.5 + 1,200,000 + 7.25, rounded up");
    const env = envOf(servingContainer(deployment));
    assert.equal(env.get("TURNPIKE_DRAIN_DELAY")?.value, "2.5");
    assert.equal(env.get("TURNPIKE_SHUTDOWN_TIMEOUT")?.value, "1200000");
    const rounded = find(renderOk({ drain: { ...drain, shutdownTimeoutSeconds: 120 } }).objects, "Deployment");
    assert.equal(rounded.spec.template.spec.terminationGracePeriodSeconds, 140, "10 + 2.5 + 120 + 7.25, rounded up");
    assert.deepEqual(servingContainer(deployment).lifecycle, { preStop: { sleep: { seconds: 10 } } });
  });

  it("sleep in preStop with the kubelet's sleep action from Kubernetes 1.30, with `sleep` in the container before, and not at all with 0", () => {
    const old = find(renderOk({}, ["--kube-version", "v1.29.4"]).objects, "Deployment");
    assert.deepEqual(servingContainer(old).lifecycle, { preStop: { exec: { command: ["sleep", "5"] } } });
    const none = find(renderOk({ drain: { preStopSleepSeconds: 0, drainDelaySeconds: 5, shutdownTimeoutSeconds: 30, marginSeconds: 10 } }).objects, "Deployment");
    assert.equal(servingContainer(none).lifecycle, undefined);
    assert.equal(none.spec.template.spec.terminationGracePeriodSeconds, 45);
  });

  it("expose metrics on their own named port with Prometheus's scrape annotations, not through the Service", () => {
    const { objects } = renderOk({});
    const deployment = find(objects, "Deployment");
    const container = servingContainer(deployment);
    assert.equal(container.ports?.find((port) => port.name === "metrics")?.containerPort, 9464);
    assert.equal(envOf(container).get("TURNPIKE_METRICS_LISTEN")?.value, "0.0.0.0:9464");
    assert.deepEqual(deployment.spec.template.metadata.annotations, { "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics" });
    const service = find(objects, "Service");
    assert.deepEqual(service.spec.ports.map((port: { name: string }) => port.name), ["http"]);
    assert.deepEqual(service.spec.selector, deployment.spec.selector.matchLabels);
  });

  it("get models, upstreams, the config file and plain settings as the server reads them", () => {
    const upstream = envOf(servingContainer(find(renderOk(upstreamOnlyValues).objects, "Deployment")));
    assert.equal(upstream.get("TURNPIKE_UPSTREAMS")?.value, "qwen=http://vllm-0.vllm:8000/v1,http://vllm-1.vllm:8000/v1;small=http://llama-server:8080/v1");
    assert.equal(upstream.has("TURNPIKE_MODELS"), false);

    const { objects } = renderOk(singleNodeValues);
    const deployment = find(objects, "Deployment");
    const container = servingContainer(deployment);
    assert.equal(envOf(container).get("TURNPIKE_MODELS")?.value, "qwen=/models/qwen2.5-0.5b-instruct-q4_k_m.gguf");
    assert.deepEqual((container as any).volumeMounts.find((mount: { name: string }) => mount.name === "models"), { name: "models", mountPath: "/models", readOnly: true });
    assert.deepEqual(deployment.spec.template.spec.volumes.find((volume: { name: string }) => volume.name === "models").persistentVolumeClaim, { claimName: "gguf-models", readOnly: true });
    const claim = find(objects, "PersistentVolumeClaim");
    assert.equal(claim.spec.storageClassName, "fast-ssd");
    assert.equal(claim.spec.resources.requests.storage, "5Gi");
    assert.equal(claim.metadata.annotations?.["helm.sh/resource-policy"], "keep");

    const cluster = renderOk(clusterValues).objects;
    const configMap = find(cluster, "ConfigMap");
    assert.deepEqual(JSON.parse((configMap as any).data["turnpike.json"]), clusterValues.config);
    const clusterDeployment = find(cluster, "Deployment");
    const env = envOf(servingContainer(clusterDeployment));
    assert.equal(env.get("TURNPIKE_CONFIG")?.value, "/etc/turnpike/turnpike.json");
    assert.equal(env.get("TURNPIKE_PARALLEL")?.value, "8");
    assert.equal(env.get("TURNPIKE_BODY_LIMIT")?.value, "10485760", "a large whole number is written whole (Helm reads numbers as float64)");
    assert.equal(env.get("TURNPIKE_SIGNUP")?.value, "closed");
    assert.equal(env.get("TURNPIKE_PUBLIC_URL")?.value, "https://ai.example.com");
    assert.equal(env.get("TURNPIKE_TRUST_PROXY")?.value, "1");
    assert.match(env.get("TURNPIKE_ALLOWED_HOSTS")?.value ?? "", /(^|,)ai\.example\.com(,|$)/, "the ingress host is answered");
    assert.match(clusterDeployment.spec.template.metadata.annotations["checksum/config"], /^[0-9a-f]{64}$/, "a config change rolls the pods");
  });
});

describe("the server reads what the chart sets", () => {
  /** What a secretKeyRef would hold, for the loader (never rendered). */
  const secretStandIns: Record<string, string> = {
    TURNPIKE_DATABASE_URL: "postgres://turnpike@db:5432/turnpike",
    TURNPIKE_REDIS_URL: "redis://redis:6379",
    STRIPE_SECRET_KEY: "sk_test_stand_in",
    STRIPE_WEBHOOK_SECRET: "whsec_stand_in",
    TURNPIKE_METRICS_TOKEN: "stand-in-token",
    VLLM_API_KEY: "stand-in-key",
  };
  const knownVariables = new Set(serveOptionList.map((option) => option.env));

  const cases: Array<[string, object, string[]]> = [
    ["default values", {}, ["qwen2.5-0.5b-instruct"]],
    ["one node", singleNodeValues, ["qwen"]],
    ["three nodes", clusterValues, ["llama"]],
    ["upstreams only", upstreamOnlyValues, ["qwen", "small"]],
  ];
  for (const [name, values, modelIds] of cases) {
    it(`${name}: every variable is a setting of src/config/options.ts and the settings load`, () => {
      const { objects } = renderOk(values);
      const container = servingContainer(find(objects, "Deployment"));
      const env: Record<string, string> = {};
      for (const variable of container.env ?? []) {
        if (variable.valueFrom !== undefined) {
          assert.ok(secretStandIns[variable.name], `a stand-in for ${variable.name}`);
          env[variable.name] = secretStandIns[variable.name]!;
        } else {
          env[variable.name] = variable.value ?? "";
        }
        if (variable.name.startsWith("TURNPIKE_")) assert.ok(knownVariables.has(variable.name), `${variable.name} is a setting of src/config/options.ts`);
      }
      const configMap = objects.find((object) => object.kind === "ConfigMap");
      if (configMap !== undefined) {
        const file = path.join(workDirectory, `turnpike-${++renderCount}.json`);
        fs.writeFileSync(file, (configMap as any).data["turnpike.json"]);
        assert.equal(env.TURNPIKE_CONFIG, "/etc/turnpike/turnpike.json");
        env.TURNPIKE_CONFIG = file;
      }
      const settings = loadSettings({ flags: {}, env });
      assert.equal(settings.host, "0.0.0.0");
      assert.equal(settings.port, 8080);
      assert.equal(settings.data_dir, "/data");
      assert.equal(settings.shutdown_timeout, 30);
      assert.equal(settings.metrics_listen, "0.0.0.0:9464");
      assert.deepEqual(settings.models.map((model) => model.id), modelIds);
      if (values === clusterValues) {
        assert.deepEqual(Object.keys(settings.upstream_api_keys), ["VLLM_API_KEY"], "the upstream's key comes from its Secret");
        assert.deepEqual(settings.plans.map((plan) => plan.id), ["pro"]);
        assert.equal(settings.database_url, secretStandIns.TURNPIKE_DATABASE_URL);
        assert.equal(settings.max_connections, 1024);
        assert.equal(settings.body_limit, 10485760);
      }
    });
  }
});

describe("secrets", () => {
  it("reach the pods only as secretKeyRef to Secrets the operator made; the chart renders no Secret and no secret value", () => {
    const { objects, text } = renderOk(clusterValues);
    assert.equal(objects.filter((object) => object.kind === "Secret").length, 0);
    const env = envOf(servingContainer(find(objects, "Deployment")));
    for (const variable of [...SECRET_VARIABLES.filter((name) => name !== "HF_TOKEN"), "VLLM_API_KEY"]) {
      const entry = env.get(variable);
      assert.ok(entry?.valueFrom?.secretKeyRef, `${variable} comes from a Secret`);
      assert.equal(entry.value, undefined, `${variable} has no value of its own`);
    }
    assert.deepEqual(env.get("STRIPE_WEBHOOK_SECRET")?.valueFrom?.secretKeyRef, { name: "turnpike-stripe", key: "webhook-secret" });
    assert.deepEqual(env.get("VLLM_API_KEY")?.valueFrom?.secretKeyRef, { name: "vllm", key: "api-key" });
    assert.equal(env.has("HF_TOKEN"), false, "an unnamed secret leaves its setting unset");
    assert.doesNotMatch(text, /postgres(ql)?:\/\/|rediss?:\/\/|sk_(live|test)_|whsec_/);
  });

  it("are refused as plain settings or in the config file", () => {
    for (const variable of SECRET_VARIABLES) {
      const rendered = render({ env: { [variable]: "postgres://user:hunter2@db/turnpike" } });
      assert.equal(rendered.ok, false, `env.${variable} is refused`);
      assert.match((rendered as { error: string }).error, new RegExp(`env\\.${variable} is a secret: name an existing Secret in secrets\\.`));
      assert.doesNotMatch((rendered as { error: string }).error, /hunter2/, "the refusal does not echo the value");
    }
    const inConfig = render({ config: { stripe_secret_key: "sk_live_123" } });
    assert.equal(inConfig.ok, false);
    assert.match((inConfig as { error: string }).error, /config\.stripe_secret_key is a secret/);
  });
});

describe("several pods", () => {
  it("refuse to render without a PostgreSQL URL secret", () => {
    for (const [values, flags] of [[{ replicaCount: 2 }, []], [{}, ["--set", "replicaCount=2"]], [{ autoscaling: { enabled: true } }, []]] as const) {
      const rendered = render(values, [...flags]);
      assert.equal(rendered.ok, false);
      assert.match((rendered as { error: string }).error, /replicaCount > 1 or autoscaling\.enabled needs PostgreSQL shared by every pod: .*secrets\.databaseUrl\.name/);
    }
  });

  it("refuse to render without a Redis URL secret, or with a ReadWriteOnce volume to share", () => {
    const noRedis = render({ replicaCount: 2, persistence: { enabled: false }, secrets: { databaseUrl: { name: "pg", key: "url" } } });
    assert.equal(noRedis.ok, false);
    assert.match((noRedis as { error: string }).error, /needs Redis shared by every pod/);
    const sharedVolume = render({ replicaCount: 2, secrets: { databaseUrl: { name: "pg", key: "url" }, redisUrl: { name: "redis", key: "url" } } });
    assert.equal(sharedVolume.ok, false);
    assert.match((sharedVolume as { error: string }).error, /cannot share a ReadWriteOnce volume at \/data/);
  });

  it("roll one at a time, keep a PodDisruptionBudget and scale on the queue metric", () => {
    const { objects } = renderOk(clusterValues);
    const deployment = find(objects, "Deployment");
    assert.deepEqual(deployment.spec.strategy, { type: "RollingUpdate", rollingUpdate: { maxSurge: 1, maxUnavailable: 0 } });
    assert.equal(deployment.spec.replicas, undefined, "the HPA owns the replica count");
    assert.deepEqual(deployment.spec.template.spec.volumes.find((volume: { name: string }) => volume.name === "data").emptyDir, { sizeLimit: "20Gi" });

    const budget = find(objects, "PodDisruptionBudget");
    assert.equal(budget.spec.maxUnavailable, 1);
    assert.deepEqual(budget.spec.selector.matchLabels, deployment.spec.selector.matchLabels);
    assert.equal(budget.spec.unhealthyPodEvictionPolicy, "AlwaysAllow");

    const autoscaler = find(objects, "HorizontalPodAutoscaler");
    assert.deepEqual(autoscaler.spec.scaleTargetRef, { apiVersion: "apps/v1", kind: "Deployment", name: deployment.metadata.name });
    assert.equal(autoscaler.spec.minReplicas, 3);
    assert.equal(autoscaler.spec.maxReplicas, 12);
    assert.deepEqual(autoscaler.spec.metrics[0], { type: "Pods", pods: { metric: { name: "turnpike_queue_waiting" }, target: { type: "AverageValue", averageValue: "2" } } });
    assert.deepEqual(autoscaler.spec.metrics[1], { type: "Resource", resource: { name: "cpu", target: { type: "Utilization", averageUtilization: 80 } } });

    const ingress = find(objects, "Ingress");
    const backend = ingress.spec.rules[0].http.paths[0].backend.service;
    assert.deepEqual(backend, { name: find(objects, "Service").metadata.name, port: { name: "http" } });
    assert.equal(ingress.spec.ingressClassName, "nginx");
  });

  it("a PodDisruptionBudget can say minAvailable instead", () => {
    const budget = find(renderOk({ ...clusterValues, podDisruptionBudget: { enabled: true, minAvailable: "50%" } }).objects, "PodDisruptionBudget");
    assert.equal(budget.spec.minAvailable, "50%");
    assert.equal(budget.spec.maxUnavailable, undefined);
  });
});
