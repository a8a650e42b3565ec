/** The console's shell: sign-in gate, sidebar navigation (a menu at phone width), and the pages. */
import { lazy, Suspense, useCallback, useEffect, useState, type ReactNode } from "react";
import { ApiError, get, post, setCsrfToken, setSignedOutHandler, type Session } from "./api.ts";
import { Link, useRouter } from "./router.tsx";
import { SessionContext, useSession } from "./session.tsx";
import { Loading, ErrorState } from "./components/ui.tsx";
import { ThemeMenu } from "./components/theme.tsx";
import { AuthPage } from "./pages/auth.tsx";
import { KeysPage } from "./pages/keys.tsx";
import { BillingPage } from "./pages/billing.tsx";
import { ModelsPage } from "./pages/models.tsx";
import { forgetTemporaryKey, PlaygroundPage } from "./pages/playground.tsx";
import { AdminPage } from "./pages/admin/index.tsx";
import { ApiReferencePage } from "./pages/api-reference.tsx";

// The charts library is the bulk of the bundle: loaded with the Usage page only.
const UsagePage = lazy(() => import("./pages/usage.tsx").then((module) => ({ default: module.UsagePage })));

type Page = { path: string; title: string; render: () => ReactNode; admin?: boolean; icon: ReactNode };

/** Line icons (24×24 paths), drawn in the text colour. */
function Icon({ children }: { children: ReactNode }) {
  return (
    <svg className="nav-icon" viewBox="0 0 24 24" fill="none" stroke="currentColor" strokeWidth="2" strokeLinecap="round" strokeLinejoin="round" aria-hidden="true">
      {children}
    </svg>
  );
}

const pages: Page[] = [
  { path: "/playground", title: "Playground", render: () => <PlaygroundPage />, icon: <Icon><path d="M21 15a2 2 0 0 1-2 2H7l-4 4V5a2 2 0 0 1 2-2h14a2 2 0 0 1 2 2z" /></Icon> },
  { path: "/keys", title: "API Keys", render: () => <KeysPage />, icon: <Icon><circle cx="7.5" cy="15.5" r="4.5" /><path d="m10.7 12.3 9.8-9.8M16 7l3 3M19 4l2 2" /></Icon> },
  { path: "/usage", title: "Usage", render: () => <UsagePage />, icon: <Icon><path d="M3 3v18h18" /><path d="M8 17V11M13 17V7M18 17v-4" /></Icon> },
  { path: "/billing", title: "Billing", render: () => <BillingPage />, icon: <Icon><rect x="2" y="5" width="20" height="14" rx="2" /><path d="M2 10h20" /></Icon> },
  { path: "/models", title: "Models", render: () => <ModelsPage />, icon: <Icon><path d="M12 2 3 7v10l9 5 9-5V7z" /><path d="m3 7 9 5 9-5M12 12v10" /></Icon> },
  { path: "/api-reference", title: "API reference", render: () => <ApiReferencePage />, icon: <Icon><path d="M4 4h16v16H4z" /><path d="m9 9-3 3 3 3M15 9l3 3-3 3" /></Icon> },
  { path: "/admin", title: "Admin", render: () => <AdminPage />, admin: true, icon: <Icon><path d="M12 2 4 5v6c0 5 3.4 9.5 8 11 4.6-1.5 8-6 8-11V5z" /></Icon> },
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
        <Suspense fallback={<Loading />}>{page === undefined || (page.admin && session.role !== "admin") ? <NotFound /> : page.render()}</Suspense>
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
                  {page.icon}
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
            <ThemeMenu />
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
