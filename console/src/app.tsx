/** The console's shell: sign-in gate, sidebar navigation (a menu at phone width), and the pages. */
import { useCallback, useEffect, useState, type ReactNode } from "react";
import { ApiError, get, post, setCsrfToken, setSignedOutHandler, type Session } from "./api.ts";
import { Link, useRouter } from "./router.tsx";
import { SessionContext, useSession } from "./session.tsx";
import { Loading, ErrorState } from "./components/ui.tsx";
import { AuthPage } from "./pages/auth.tsx";
import { KeysPage } from "./pages/keys.tsx";
import { UsagePage } from "./pages/usage.tsx";
import { BillingPage } from "./pages/billing.tsx";
import { ModelsPage } from "./pages/models.tsx";
import { forgetTemporaryKey, PlaygroundPage } from "./pages/playground.tsx";
import { AdminPage } from "./pages/admin.tsx";

type Page = { path: string; title: string; render: () => ReactNode; admin?: boolean; icon: string };

const pages: Page[] = [
  { path: "/playground", title: "Playground", render: () => <PlaygroundPage />, icon: "▶" },
  { path: "/keys", title: "API keys", render: () => <KeysPage />, icon: "⚿" },
  { path: "/usage", title: "Usage", render: () => <UsagePage />, icon: "▤" },
  { path: "/billing", title: "Billing", render: () => <BillingPage />, icon: "¤" },
  { path: "/models", title: "Models", render: () => <ModelsPage />, icon: "◈" },
  { path: "/admin", title: "Admin", render: () => <AdminPage />, admin: true, icon: "⚙" },
];

export function App() {
  const [session, setSessionState] = useState<Session | null>(null);
  const [loading, setLoading] = useState(true);
  const [error, setError] = useState<ApiError>();
  const { path, navigate } = useRouter();

  const setSession = useCallback((next: Session | null) => {
    setCsrfToken(next?.csrf_token ?? "");
    setSessionState(next);
  }, []);

  const load = useCallback(() => {
    setLoading(true);
    setError(undefined);
    get<Session>("/api/auth/session").then(
      (current) => {
        setSession(current);
        setLoading(false);
      },
      (failure: ApiError) => {
        if (failure.status === 401 || failure.status === 403) setSession(null);
        else setError(failure);
        setLoading(false);
      },
    );
  }, [setSession]);

  useEffect(load, [load]);
  useEffect(() => {
    setSignedOutHandler(() => setSession(null));
  }, [setSession]);

  const signOut = useCallback(async () => {
    try {
      if (session !== null) await forgetTemporaryKey(session.id);
      await post("/api/auth/signout");
    } finally {
      setSession(null);
      navigate("/signin");
    }
  }, [navigate, session, setSession]);

  if (loading) return <Loading label="Loading Turnpike…" />;
  if (error) return <ErrorState error={error} retry={load} />;

  const context = { session, setSession, signOut };
  if (session === null) {
    return (
      <SessionContext.Provider value={context}>
        <AuthPage mode={path === "/signup" ? "signup" : "signin"} />
      </SessionContext.Provider>
    );
  }
  if (path === "/" || path === "/signin" || path === "/signup") {
    queueMicrotask(() => navigate("/playground", { replace: true }));
    return <Loading />;
  }
  const page = pages.find((candidate) => path === candidate.path || path.startsWith(`${candidate.path}/`));
  return (
    <SessionContext.Provider value={context}>
      <Shell current={page?.path}>
        {page === undefined || (page.admin && session.role !== "admin") ? <NotFound /> : page.render()}
      </Shell>
    </SessionContext.Provider>
  );
}

function NotFound() {
  return (
    <div className="state empty">
      <strong>Page not found</strong>
      <p className="muted">There is nothing here.</p>
      <Link className="button" to="/playground">
        Go to the playground
      </Link>
    </div>
  );
}

function Shell({ current, children }: { current: string | undefined; children: ReactNode }) {
  const { session, signOut } = useSession();
  const [menuOpen, setMenuOpen] = useState(false);
  const visible = pages.filter((page) => !page.admin || session?.role === "admin");
  useEffect(() => {
    setMenuOpen(false);
  }, [current]);
  return (
    <div className="shell">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <aside className={menuOpen ? "sidebar open" : "sidebar"}>
        <div className="sidebar-top">
          <Link to="/playground" className="brand">
            <span className="brand-mark" aria-hidden="true">T</span> Turnpike
          </Link>
          <button type="button" className="icon-button menu-button" aria-expanded={menuOpen} aria-controls="main-nav" onClick={() => setMenuOpen((open) => !open)}>
            <span className="visually-hidden">Menu</span>☰
          </button>
        </div>
        <nav id="main-nav" aria-label="Main">
          <ul>
            {visible.map((page) => (
              <li key={page.path}>
                <Link to={page.path} className={page.path === current ? "nav-link active" : "nav-link"} aria-current={page.path === current ? "page" : undefined}>
                  <span className="nav-icon" aria-hidden="true">{page.icon}</span>
                  {page.title}
                </Link>
              </li>
            ))}
          </ul>
          <div className="account-box">
            <div className="account-email" title={session?.email}>
              {session?.email}
            </div>
            <div className="muted small">{session?.role === "admin" ? "Administrator" : "Member"}</div>
            <button type="button" className="button full" onClick={() => void signOut()}>
              Sign out
            </button>
          </div>
        </nav>
      </aside>
      <main id="main" className="content" tabIndex={-1}>
        {children}
      </main>
    </div>
  );
}
