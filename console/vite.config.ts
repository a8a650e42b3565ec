import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

/** `npm run console:dev` serves the console with hot reload and forwards the APIs to a running `turnpike serve`. */
const target = process.env.TURNPIKE_URL ?? "http://127.0.0.1:8080";

export default defineConfig({
  root: import.meta.dirname,
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 1200 },
  server: {
    proxy: {
      // The server checks Origin on session writes: present the API's own origin.
      "/api": { target, changeOrigin: true, headers: { origin: target } },
      "/v1": { target, changeOrigin: true },
    },
  },
});
