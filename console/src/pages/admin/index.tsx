/** Admin: accounts (grant a plan, disable), plans (create, edit), redemption codes, all keys, models. */
import { useRouter } from "../../router.tsx";
import { PageHeader, Tabs } from "../../components/ui.tsx";
import { AccountsSection } from "./accounts.tsx";
import { PlansSection } from "./plans.tsx";
import { CodesSection } from "./codes.tsx";
import { AllKeysSection, ModelsSection } from "./keys-and-models.tsx";

type Section = "accounts" | "plans" | "codes" | "keys" | "models";

export function AdminPage() {
  const { path, navigate } = useRouter();
  const section = (path.split("/")[2] as Section | undefined) ?? "accounts";
  return (
    <>
      <PageHeader title="Admin" description="Manage this installation: accounts, plans, codes, keys and models." />
      <Tabs
        label="Admin sections"
        value={section}
        onChange={(next) => navigate(`/admin/${next}`)}
        tabs={[
          ["accounts", "Accounts"],
          ["plans", "Plans"],
          ["codes", "Codes"],
          ["keys", "Keys"],
          ["models", "Models"],
        ]}
      />
      <div className="tab-panel" role="tabpanel">
        {section === "accounts" && <AccountsSection />}
        {section === "plans" && <PlansSection />}
        {section === "codes" && <CodesSection />}
        {section === "keys" && <AllKeysSection />}
        {section === "models" && <ModelsSection />}
      </div>
    </>
  );
}
