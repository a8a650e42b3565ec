/**
 * Sign in and sign up: email and password. While the installation has no admin, sign-up also
 * asks for the one-time setup code `turnpike serve` printed: the account made with it is the
 * admin. With `--signup closed` only that first admin may sign up here.
 */
import { useEffect, useState } from "react";
import { ApiError, get, post, type AuthSetup, type Session } from "../api.ts";
import { Link, useRouter } from "../router.tsx";
import { useSession } from "../session.tsx";
import { Field, Notice } from "../components/ui.tsx";

export function AuthPage({ mode }: { mode: "signin" | "signup" }) {
  const { setSession } = useSession();
  const { navigate, path } = useRouter();
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [setupCode, setSetupCode] = useState("");
  const [setup, setSetup] = useState<AuthSetup>();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<ApiError>();
  const signingUp = mode === "signup";
  const askForCode = signingUp && setup?.setup_required === true;
  const closed = setup?.signup === "closed" && !setup.setup_required;

  useEffect(() => {
    // Without an answer the page works as for an open server; the sign-up call itself says the rest.
    get<AuthSetup>("/api/auth/setup").then(setSetup, () => {});
  }, []);

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const code = setupCode.trim();
      const body = signingUp && code !== "" ? { email, password, setup_code: code } : { email, password };
      const session = await post<Session>(signingUp ? "/api/auth/signup" : "/api/auth/signin", body);
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
        {signingUp && closed && <Notice tone="info">Sign-up is closed on this server. Ask an administrator for an account.</Notice>}
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
        {askForCode && (
          <Field
            label="Setup code"
            htmlFor="setup-code"
            hint={
              setup?.signup === "closed"
                ? "This server has no administrator yet: enter the setup code that turnpike serve printed when it started."
                : "This server has no administrator yet. To become it, enter the setup code that turnpike serve printed when it started; leave it empty for a regular account."
            }
          >
            <input
              id="setup-code"
              name="setup-code"
              type="text"
              autoComplete="off"
              spellCheck={false}
              required={setup?.signup === "closed"}
              placeholder="XXXX-XXXX-XXXX-XXXX"
              value={setupCode}
              onChange={(event) => setSetupCode(event.target.value)}
            />
          </Field>
        )}
        <button type="submit" className="button primary full" disabled={busy || (signingUp && closed)}>
          {busy ? "Please wait…" : signingUp ? "Create account" : "Sign in"}
        </button>
        <p className="muted center">
          {signingUp ? (
            <>
              Already have an account? <Link to="/signin">Sign in</Link>
            </>
          ) : closed ? null : (
            <>
              New here? <Link to="/signup">Create an account</Link>
            </>
          )}
        </p>
      </form>
    </div>
  );
}
