#!/usr/bin/env node
// Entry point of the `turnpike` command. The CLI is TypeScript run by Node 24's type stripping.
const [major] = process.versions.node.split(".").map(Number);
if (major < 24) {
  process.stderr.write(
    `turnpike needs Node.js 24 or newer (this is ${process.version}). ` +
      "Run it through npm (npm start, npx turnpike), which uses the Node.js 24 installed in node_modules.\n",
  );
  process.exit(1);
}
await import("../src/cli/main.ts");
