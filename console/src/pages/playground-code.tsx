/** Playground › View code: the next request as curl, Node.js and Python (openai SDK) calls, and its exact JSON body, in the dialect chosen. */
import { useState } from "react";
import { CopyButton, Dialog, Tabs } from "../components/ui.tsx";
import { DIALECTS, type Dialect } from "./playground-dialects.ts";

/** JSON as a Python literal (the samples' bodies hold only strings, numbers, booleans, lists and objects). */
function pythonLiteral(json: string): string {
  return json.replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None");
}

/** The SDK calls of each dialect, without streaming, and what they print. */
function sdkCode(dialect: Dialect, baseUrl: string, json: string): { node: string; python: string } {
  const nodeClient = `import OpenAI from "openai";\n\nconst client = new OpenAI({ baseURL: "${baseUrl}", apiKey: process.env.TURNPIKE_KEY });\n\n`;
  const pythonClient = `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="${baseUrl}", api_key=os.environ["TURNPIKE_KEY"])\n\n`;
  if (dialect === "chat") {
    return {
      node: `${nodeClient}const completion = await client.chat.completions.create(${json});\nconsole.log(completion.choices[0].message.content, completion.usage);`,
      python: `${pythonClient}completion = client.chat.completions.create(**${pythonLiteral(json)})\nprint(completion.choices[0].message.content, completion.usage)`,
    };
  }
  return {
    node:
      `${nodeClient}const response = await client.responses.create(${json});\nconsole.log(response.output_text, response.usage);\n\n` +
      `// Streamed, as the playground does it:\n// const stream = client.responses.stream({ ...the same body });\n// stream.on("response.output_text.delta", (event) => process.stdout.write(event.delta));\n// console.log((await stream.finalResponse()).usage);`,
    python: `${pythonClient}response = client.responses.create(**${pythonLiteral(json)})\nprint(response.output_text, response.usage)`,
  };
}

/** `body` is what the next Send posts to `dialect`'s endpoint; the code samples leave out its streaming options. */
export function CodeDialog({ dialect, body, onClose }: { dialect: Dialect; body: Record<string, unknown>; onClose: () => void }) {
  const [language, setLanguage] = useState<"curl" | "node" | "python" | "json">("curl");
  const baseUrl = `${window.location.origin}/v1`;
  const path = DIALECTS[dialect].path;
  const plain = { ...body };
  delete plain.stream;
  delete plain.stream_options;
  const json = JSON.stringify(plain, null, 2);
  const code = {
    json: JSON.stringify(body, null, 2),
    curl: `curl ${window.location.origin}${path} \\\n  -H "Authorization: Bearer $TURNPIKE_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d '${json.replace(/'/g, "'\\''")}'`,
    ...sdkCode(dialect, baseUrl, json),
  }[language];
  return (
    <Dialog title="View code" onClose={onClose} wide footer={<CopyButton text={code} label="Copy code" />}>
      <p className="muted">
        {language === "json" ? (
          <>
            Exactly the body the next Send posts to <code>{path}</code> (streamed).
          </>
        ) : (
          <>
            The same request to <code>{path}</code> with your own key in <code>TURNPIKE_KEY</code>, without streaming.
          </>
        )}
      </p>
      <Tabs
        label="Language"
        value={language}
        onChange={setLanguage}
        tabs={[
          ["curl", "curl"],
          ["node", "Node.js (openai)"],
          ["python", "Python (openai)"],
          ["json", "Request body"],
        ]}
      />
      <pre className="code" tabIndex={0} aria-label={`${language} code`}>
        <code>{code}</code>
      </pre>
    </Dialog>
  );
}
