/**
 * Explicit fault points in a real database's queries, for tests that must drive one exact
 * interleaving: `pauseAfter` holds the first query whose SQL matches after the database ran it
 * (inside its transaction, before the caller sees the answer), until the test releases it;
 * `failAt` fails the first matching query before it is sent, as a cut connection would.
 * Works through a Kysely plugin on the same pool (`faults.database`), on SQLite and PostgreSQL.
 */
import type { Kysely, KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryId, QueryResult, RootOperationNode, UnknownRow } from "kysely";
import { onCompiledQueries } from "./compiled-queries.ts";
import type { Database } from "../../src/store/schema.ts";

type Fault = { match: RegExp; kind: "pause" | "fail"; reached: PromiseWithResolvers<void>; release: PromiseWithResolvers<void> };

export class QueryFaults {
  readonly database: Kysely<Database>;
  readonly #base: Kysely<Database>;
  #faults: Fault[] = [];
  readonly #paused = new WeakMap<QueryId, Fault>();

  constructor(database: Kysely<Database>) {
    this.#base = database;
    const plugin: KyselyPlugin = {
      transformQuery: (args: PluginTransformQueryArgs): RootOperationNode => this.#onQuery(args.node, args.queryId),
      transformResult: async (args: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> => {
        const fault = this.#paused.get(args.queryId);
        if (fault !== undefined) {
          fault.reached.resolve();
          await fault.release.promise;
        }
        return args.result;
      },
    };
    const withFaults = database.withPlugin(plugin);
    // A query the caller compiled itself never passes the plugin's `transformQuery`: its SQL is
    // matched here, on the database and on the transactions begun on it.
    this.database = onCompiledQueries(withFaults, (query) => {
      if (query.queryId !== undefined) this.#onQuery(query.query, query.queryId, query.sql);
    });
  }

  /** Holds the next query matching `match` once it ran, until `release()`. */
  pauseAfter(match: RegExp): { reached: Promise<void>; release: () => void } {
    const fault: Fault = { match, kind: "pause", reached: Promise.withResolvers(), release: Promise.withResolvers() };
    this.#faults.push(fault);
    return { reached: fault.reached.promise, release: () => fault.release.resolve() };
  }

  /** Fails the next query matching `match`, before it is sent, with a connection error. */
  failAt(match: RegExp): { reached: Promise<void> } {
    const fault: Fault = { match, kind: "fail", reached: Promise.withResolvers(), release: Promise.withResolvers() };
    this.#faults.push(fault);
    return { reached: fault.reached.promise };
  }

  #onQuery(node: RootOperationNode, queryId: QueryId, compiled?: string): RootOperationNode {
    if (this.#faults.length === 0) return node;
    const text = compiled ?? this.#base.getExecutor().compileQuery(node, queryId).sql;
    const fault = this.#faults.find((candidate) => candidate.match.test(text));
    if (fault === undefined) return node;
    this.#faults = this.#faults.filter((candidate) => candidate !== fault);
    if (fault.kind === "pause") {
      this.#paused.set(queryId, fault);
      return node;
    }
    fault.reached.resolve();
    throw Object.assign(new Error("Connection terminated unexpectedly (a fault point of the test)"), { code: "ECONNRESET" });
  }
}
