/**
 * A query its caller compiled itself (`executeQuery(CompiledQuery.raw(…))`, as the response store's
 * upsert and the group commit's usage records are) never passes a Kysely plugin's
 * `transformQuery`. `onCompiledQueries` tells a test of each one, on the database and on every
 * transaction begun on it.
 */
import type { CompiledQuery, Kysely, Transaction } from "kysely";
import type { Database } from "../../src/store/schema.ts";

/** `executor` with `onCompiled` called before each query compiled by its caller runs, and its transactions too. */
export function onCompiledQueries<Executor extends object>(executor: Executor, onCompiled: (query: CompiledQuery) => void): Executor {
  return new Proxy(executor, {
    get: (target, property) => {
      if (property === "executeQuery") {
        return (query: CompiledQuery | { compile(): CompiledQuery }, ...rest: unknown[]) => {
          if (!("compile" in query)) onCompiled(query);
          return (target as { executeQuery: (...args: unknown[]) => unknown }).executeQuery.call(target, query, ...rest);
        };
      }
      if (property === "transaction") return () => transactionBuilder((target as unknown as Kysely<Database>).transaction(), onCompiled);
      // Kysely's methods read private fields: they run on the instance itself, not the proxy.
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}

/** A transaction builder whose transactions are watched too (`setIsolationLevel` and the like keep it so). */
function transactionBuilder<Builder extends object>(builder: Builder, onCompiled: (query: CompiledQuery) => void): Builder {
  return new Proxy(builder, {
    get: (target, property) => {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      if (property === "execute") {
        return (callback: (transaction: Transaction<Database>) => Promise<unknown>) =>
          (value as (callback: (transaction: Transaction<Database>) => Promise<unknown>) => Promise<unknown>).call(target, (transaction) =>
            callback(onCompiledQueries(transaction, onCompiled)),
          );
      }
      return (...args: unknown[]) => {
        const result: unknown = (value as (...args: unknown[]) => unknown).apply(target, args);
        return result === target || (typeof result === "object" && result !== null && "execute" in result && result.constructor === target.constructor)
          ? transactionBuilder(result as object, onCompiled)
          : result;
      };
    },
  });
}
