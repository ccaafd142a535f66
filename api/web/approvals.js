// The approval queue: pending approvals, oldest first, each with its evidence
// and the hold it gates; approve or deny with a note. Items are kept across
// refreshes (never rebuilt), so a note being typed and the focus survive.

import { api, ApiError, path, seg, singleFlight } from "./api.js";
import { byId, fill, h, prettyJson, setError, uid } from "./dom.js";
import { fmtSpan, fmtStamp, ms, relative } from "./time.js";

const PAGE = 100;
const MAX_PAGES = 5;

const REFUSALS = {
  own_approval: "You asked for this approval yourself: another reviewer must decide it.",
  approval_decided: "Someone decided this approval already.",
  approval_expired: "This approval expired before the decision.",
  role_forbidden: "Your key may not decide approvals.",
  csrf_failed: "The session's protection token was refused: reload the page.",
};

export function createApprovals({ announce, onDecided }) {
  const list = byId("approvals-list");
  const empty = byId("approvals-empty");
  const count = byId("approvals-count");
  const errorBox = byId("approvals-error");
  const shown = new Map(); // approval id -> its <li>
  let loaded = false;

  async function load() {
    const items = [];
    let cursor = null;
    for (let page = 0; page < MAX_PAGES; page += 1) {
      const doc = await api("GET", path("/v1/approvals", { status: "pending", limit: PAGE, cursor }));
      items.push(...(Array.isArray(doc?.items) ? doc.items : []));
      cursor = doc?.next_cursor;
      if (!cursor) break;
    }
    return items.filter((a) => a && a.status === "pending" && typeof a.id === "string");
  }

  const refresh = singleFlight(async () => {
    let items;
    try {
      items = await load();
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) setError(errorBox, error.message);
      return;
    }
    setError(errorBox, "");
    const pending = new Set(items.map((a) => a.id));
    for (const [id, li] of shown) {
      if (!pending.has(id)) {
        li.remove();
        shown.delete(id);
      }
    }
    // New items go in the server's order (oldest first) before the item that
    // follows them; items already shown are never moved (a move loses the focus).
    const fresh = [];
    let next = null;
    for (const approval of [...items].reverse()) {
      let li = shown.get(approval.id);
      if (!li) {
        li = render(approval, loaded);
        shown.set(approval.id, li);
        list.insertBefore(li, next);
        fresh.unshift(approval);
      }
      next = li;
    }
    if (loaded && fresh.length) {
      const summaries = fresh.map((a) => String(a.summary ?? "")).join("; ");
      announce(`New approval requested: ${summaries}`);
    }
    loaded = true;
    updateCount();
  });

  function updateCount() {
    count.textContent = String(shown.size);
    count.dataset.n = String(shown.size);
    empty.hidden = shown.size > 0;
  }

  function render(approval, isNew) {
    const titleId = uid("approval-title");
    const noteId = uid("approval-note");
    const error = h("p", { class: "error", role: "alert" });
    const note = h("textarea", { id: noteId, maxlength: "1000", rows: "2" });
    const approve = h("button", { type: "button", class: "approve", text: "Approve" });
    const deny = h("button", { type: "button", class: "deny", text: "Deny" });
    const li = h(
      "li",
      { class: isNew ? "approval fresh" : "approval", "aria-labelledby": titleId, dataset: { id: approval.id } },
      h("h3", { id: titleId, text: String(approval.summary ?? "(no summary)") }),
      meta(approval),
      gatedHold(approval),
      h(
        "details",
        { class: "evidence-box", open: true },
        h("summary", { text: "Evidence" }),
        h("pre", { class: "evidence", tabindex: "0" }, prettyJson(approval.evidence)),
      ),
      h(
        "div",
        { class: "decide" },
        h("label", { for: noteId, text: "Note (optional)" }),
        note,
        h("div", { class: "buttons" }, approve, deny),
        error,
      ),
    );
    const decide = async (decision) => {
      approve.disabled = true;
      deny.disabled = true;
      setError(error, "");
      const body = { decision };
      if (note.value.trim()) body.note = note.value.trim();
      try {
        const decided = await api("POST", `/v1/approvals/${seg(approval.id)}/decision`, body);
        const verb = decided?.status === "denied" ? "Denied" : "Approved";
        li.remove();
        shown.delete(approval.id);
        updateCount();
        announce(`${verb}: ${String(approval.summary ?? "")}`);
        onDecided(decided);
      } catch (err) {
        approve.disabled = false;
        deny.disabled = false;
        if (!(err instanceof ApiError) || err.status === 401) return;
        setError(error, REFUSALS[err.code] || err.message);
        if (err.code === "approval_decided" || err.code === "approval_expired") refresh();
      }
    };
    approve.addEventListener("click", () => decide("approve"));
    deny.addEventListener("click", () => decide("deny"));
    return li;
  }

  return { refresh, clear: () => { shown.clear(); list.replaceChildren(); loaded = false; updateCount(); } };
}

function meta(approval) {
  const created = ms(approval.created_at);
  const expires = ms(approval.expires_at);
  const rows = [
    ["Requested by", String(approval.requested_by ?? "")],
    ["Workflow", approval.workflow_id == null ? "—" : String(approval.workflow_id)],
    ["Asked", created === null ? "—" : timeEl(created, approval.created_at)],
    ["Expires", expires === null ? "—" : timeEl(expires, approval.expires_at)],
  ];
  if (approval.action && typeof approval.action === "object") {
    rows.push(["Action", String(approval.action.type ?? "")]);
  }
  return h("dl", { class: "meta" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)]));
}

/** A <time> whose relative text the page's ticker keeps current. */
export function timeEl(t, isoText) {
  return h("time", {
    datetime: String(isoText),
    title: fmtStamp(t),
    dataset: { rel: String(t) },
    text: `${relative(t)} (${fmtStamp(t)})`,
  });
}

/** Refresh every relative time on the page. */
export function tickTimes(root = document) {
  for (const el of root.querySelectorAll("time[data-rel]")) {
    const t = Number(el.dataset.rel);
    el.textContent = `${relative(t)} (${fmtStamp(t)})`;
  }
}

function gatedHold(approval) {
  if (typeof approval.hold_id !== "string") return null;
  const box = h("p", { class: "gated" }, "Gated hold: ", h("span", { class: "mono", text: approval.hold_id }));
  api("GET", `/v1/holds/${seg(approval.hold_id)}`).then(
    (hold) => {
      const start = ms(hold?.start);
      const end = ms(hold?.end);
      const when = start !== null && end !== null ? fmtSpan(start, end) : "";
      const people = Array.isArray(hold?.attendees) ? hold.attendees.map(String).join(", ") : "";
      fill(
        box,
        "Gated hold: ",
        h("strong", { text: String(hold?.title ?? "") }),
        ` — ${when} — ${people} — ${String(hold?.status ?? "")}`,
      );
    },
    () => {},
  );
  return box;
}
