/** What a credit is worth, from `GET /api/settings`: fetched once per page load, shared by every page. */
import { useEffect, useState } from "react";
import { get } from "./api.ts";
import type { CreditValue } from "./format.ts";
import type { PublicSettings } from "../../src/protocol/service.ts";

let request: Promise<CreditValue | null> | undefined;

function fetchCreditValue(): Promise<CreditValue | null> {
  request ??= get<PublicSettings>("/api/settings").then(
    (settings) => settings.credit_value,
    () => {
      // Credits only this time; asked again on the next page that needs it.
      request = undefined;
      return null;
    },
  );
  return request;
}

/** The server's credit value; null while loading, or when it has none (show credits only). */
export function useCreditValue(): CreditValue | null {
  const [creditValue, setCreditValue] = useState<CreditValue | null>(null);
  useEffect(() => {
    let current = true;
    void fetchCreditValue().then((value) => current && setCreditValue(value));
    return () => {
      current = false;
    };
  }, []);
  return creditValue;
}
