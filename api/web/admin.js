// Admins only: webhook subscriptions and dead events, with a re-drive button.
// A reviewer's key gets 403 here, so the page shows this panel to admins alone.

import { api, ApiError, path, seg, singleFlight } from "./api.js";
import { byId, fill, h, setError } from "./dom.js";
import { fmtStamp, ms } from "./time.js";

export function createAdmin({ announce }) {
  const panel = byId("admin");
  const hooks = byId("webhook-list");
  const hooksEmpty = byId("webhooks-empty");
  const dead = byId("dead-list");
  const deadEmpty = byId("dead-empty");
  const errorBox = byId("admin-error");
  let enabled = false;

  const refresh = singleFlight(async () => {
    if (!enabled) return;
    try {
      const [subs, events] = await Promise.all([
        api("GET", path("/v1/webhooks", { limit: 100 })),
        api("GET", path("/v1/outbox", { state: "dead", limit: 100 })),
      ]);
      setError(errorBox, "");
      showHooks(Array.isArray(subs?.items) ? subs.items : []);
      showDead(Array.isArray(events?.items) ? events.items : []);
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) setError(errorBox, error.message);
    }
  });

  function showHooks(items) {
    hooksEmpty.hidden = items.length > 0;
    fill(
      hooks,
      items.map((w) => {
        const status = w?.status === "active" ? "active" : "disabled";
        const last = ms(w?.last_delivery_at);
        const facts = [
          `topics ${Array.isArray(w?.topics) ? w.topics.map(String).join(", ") : ""}`,
          w?.last_status == null ? "no attempt yet" : `last answer ${String(w.last_status)}`,
          last === null ? null : `last delivered ${fmtStamp(last)}`,
          w?.consecutive_failures ? `${String(w.consecutive_failures)} failures in a row` : null,
          w?.disabled_reason ? `disabled: ${String(w.disabled_reason)}` : null,
        ].filter(Boolean);
        return h(
          "li",
          {},
          h("span", { class: `badge ${status}`, text: status }),
          " ",
          h("span", { class: "mono", text: String(w?.url ?? "") }),
          h("div", { class: "hint", text: facts.join(" · ") }),
        );
      }),
    );
  }

  function showDead(items) {
    deadEmpty.hidden = items.length > 0;
    fill(
      dead,
      items.map((event) => {
        const created = ms(event?.created_at);
        const errors = (Array.isArray(event?.deliveries) ? event.deliveries : [])
          .map((d) => d?.last_error || (d?.last_status == null ? null : `HTTP ${String(d.last_status)}`))
          .filter(Boolean)
          .map(String);
        const error = h("p", { class: "error", role: "alert" });
        const button = h("button", { type: "button", text: "Re-drive" });
        button.setAttribute("aria-label", `Re-drive event ${String(event?.id ?? "")}`);
        button.addEventListener("click", async () => {
          button.disabled = true;
          setError(error, "");
          try {
            await api("POST", `/v1/outbox/${seg(event.id)}/redrive`, {});
            announce(`Event ${String(event.id)} is queued for delivery again.`);
            refresh();
          } catch (err) {
            button.disabled = false;
            if (err instanceof ApiError && err.status !== 401) setError(error, err.message);
          }
        });
        return h(
          "li",
          {},
          h(
            "div",
            {},
            h("strong", { class: "mono", text: String(event?.type ?? "") }),
            " ",
            h("span", { class: "mono", text: String(event?.id ?? "") }),
            h(
              "div",
              { class: "hint" },
              created === null ? "" : `created ${fmtStamp(created)}`,
              errors.length ? ` · ${errors.join("; ")}` : "",
            ),
          ),
          button,
          error,
        );
      }),
    );
  }

  byId("admin-refresh").addEventListener("click", () => refresh());

  return {
    refresh,
    enable(on) {
      enabled = on;
      panel.hidden = !on;
      if (!on) {
        hooks.replaceChildren();
        dead.replaceChildren();
      }
    },
  };
}
