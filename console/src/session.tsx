/** Who is signed in: loaded once from `/api/auth/session`, set on sign-in, cleared on sign-out. */
import { createContext, useContext } from "react";
import type { Session } from "./api.ts";

export type SessionState = {
  session: Session | null;
  setSession: (session: Session | null) => void;
  signOut: () => Promise<void>;
};

export const SessionContext = createContext<SessionState>({ session: null, setSession: () => {}, signOut: async () => {} });

export function useSession(): SessionState {
  return useContext(SessionContext);
}

/** The signed-in session; pages behind sign-in only render with one. */
export function useSignedIn(): Session {
  const { session } = useSession();
  if (session === null) throw new Error("not signed in");
  return session;
}
