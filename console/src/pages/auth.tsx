/** Sign in and sign up: email and password. The first account of a new installation becomes its admin. */
import { useState } from "react";
import { ApiError, post, type Session } from "../api.ts";
import { Link, useRouter } from "../router.tsx";
import { useSession } from "../session.tsx";
import { Field, Notice } from "../components/ui.tsx";

export function AuthPage({ mode }: { mode: "signin" | "signup" }) {
  const { setSession } = useSession();
  const { navigate, path } = useRouter();
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError>();
  const signingUp = mode === "signup";

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const session = await post<Session>(signingUp ? "/api/auth/signup" : "/api/auth/signin", { email, password });
      setSession(session);
      // Back to the page that asked for sign-in, if any.
      const asked = path !== "/" && path !== "/signin" && path !== "/signup" ? `${path}${window.location.search}` : undefined;
      navigate(asked ?? (signingUp ? "/keys" : "/playground"), { replace: true });
    } catch (failure) {
      setError(failure as ApiError);
      setBusy(false);
    }
  }

  return (
    <div className="auth-page">
      <form className="auth-card" onSubmit={submit} noValidate={false}>
        <div className="brand auth-brand">
          <span className="brand-mark" aria-hidden="true">T</span> Turnpike
        </div>
        <h1>{signingUp ? "Create your account" : "Welcome back"}</h1>
        <p className="muted">{signingUp ? "Sign up to create API keys and try the models." : "Sign in to manage keys, usage and billing."}</p>
        {error && <Notice tone="error">{error.message}</Notice>}
        <Field label="Email address" htmlFor="email">
          <input id="email" name="email" type="email" autoComplete="email" required value={email} onChange={(event) => setEmail(event.target.value)} autoFocus />
        </Field>
        <Field label="Password" htmlFor="password" hint={signingUp ? "At least 8 characters." : undefined}>
          <input
            id="password"
            name="password"
            type="password"
            autoComplete={signingUp ? "new-password" : "current-password"}
            required
            minLength={signingUp ? 8 : 1}
            value={password}
            onChange={(event) => setPassword(event.target.value)}
          />
        </Field>
        <button type="submit" className="button primary full" disabled={busy}>
          {busy ? "Please wait…" : signingUp ? "Create account" : "Sign in"}
        </button>
        <p className="muted center">
          {signingUp ? (
            <>
              Already have an account? <Link to="/signin">Sign in</Link>
            </>
          ) : (
            <>
              New here? <Link to="/signup">Create an account</Link>
            </>
          )}
        </p>
      </form>
    </div>
  );
}
