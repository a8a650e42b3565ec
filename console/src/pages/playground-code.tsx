/** Playground › View code: the next request as curl, Node.js and Python (openai SDK) calls, and its exact JSON body. */
import { useState } from "react";
import { CopyButton, Dialog, Tabs } from "../components/ui.tsx";

/** `body` is what the next Send posts; the code samples leave out its streaming options. */
export function CodeDialog({ body, onClose }: { body: Record<string, unknown>; onClose: () => void }) {
  const [language, setLanguage] = useState<"curl" | "node" | "python" | "json">("curl");
  const baseUrl = `${window.location.origin}/v1`;
  const plain = { ...body };
  delete plain.stream;
  delete plain.stream_options;
  const json = JSON.stringify(plain, null, 2);
  const indented = (text: string, by: string) => text.split("\n").join(`\n${by}`);
  const code = {
    json: JSON.stringify(body, null, 2),
    curl: `curl ${baseUrl}/chat/completions \\\n  -H "Authorization: Bearer $TURNPIKE_KEY" \\\n  -H "Content-Type: application/json" \\\n  -d '${json.replace(/'/g, "'\\''")}'`,
    node: `import OpenAI from "openai";\n\nconst client = new OpenAI({ baseURL: "${baseUrl}", apiKey: process.env.TURNPIKE_KEY });\n\nconst completion = await client.chat.completions.create(${indented(json, "")});\nconsole.log(completion.choices[0].message.content, completion.usage);`,
    python: `import os\nfrom openai import OpenAI\n\nclient = OpenAI(base_url="${baseUrl}", api_key=os.environ["TURNPIKE_KEY"])\n\ncompletion = client.chat.completions.create(**${indented(json.replace(/\btrue\b/g, "True").replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None"), "")})\nprint(completion.choices[0].message.content, completion.usage)`,
  }[language];
  return (
    <Dialog title="View code" onClose={onClose} wide footer={<CopyButton text={code} label="Copy code" />}>
      <p className="muted">
        {language === "json" ? (
          <>Exactly the body the next Send posts to <code>/v1/chat/completions</code> (streamed).</>
        ) : (
          <>
            The same request with your own key in <code>TURNPIKE_KEY</code>, without streaming.
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
