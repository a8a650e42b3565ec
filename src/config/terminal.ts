/**
 * What the environment says about the terminal `serve` prints to, beside the settings: read here,
 * since `src/config/` is the one reader of `process.env`.
 */
export type TerminalEnvironment = {
  /** FORCE_COLOR as set: colors even where the output is not a terminal (NO_COLOR and TERM are Node's `hasColors()`'s). */
  FORCE_COLOR?: string;
  /** Started by an npm script (`npm start`): a shell finds the command as `npx turnpike`, not `turnpike`. */
  startedByNpm: boolean;
};

export function terminalEnvironment(): TerminalEnvironment {
  const force = process.env.FORCE_COLOR;
  return { ...(force === undefined ? {} : { FORCE_COLOR: force }), startedByNpm: process.env.npm_lifecycle_event !== undefined };
}
