// The audit stream, newest first and live, with the chain's verification; and
// the replay counts per workflow.

import { api, ApiError, path, singleFlight } from "./api.js";
import { byId, fill, h, setError } from "./dom.js";
import { fmtStamp, ms } from "./time.js";

const SHOWN = 50;
const KEPT = 200;

export function createAudit() {
  const rows = byId("audit-rows");
  const verdict = byId("audit-verdict");
  const errorBox = byId("audit-error");
  const verifyButton = byId("audit-verify");
  const workflowRows = byId("workflow-rows");
  const workflowsEmpty = byId("workflows-empty");
  const workflowsBox = byId("workflows-box");
  const seen = new Set();
  let verified = null; // {count, head, at}
  let newest = 0;

  /** The latest entries; answers the newest seq, for the live stream to go on from. */
  async function load() {
    const check = await verify();
    const total = Number.isInteger(check?.count) ? check.count : 0;
    const doc = await api("GET", path("/v1/audit", { cursor: Math.max(0, total - SHOWN), limit: SHOWN }));
    const items = Array.isArray(doc?.items) ? doc.items : [];
    seen.clear();
    rows.replaceChildren();
    for (const entry of items) add(entry, false);
    return newest;
  }

  async function verify() {
    verifyButton.disabled = true;
    try {
      const doc = await api("GET", "/v1/audit/verify");
      verified = { count: doc?.count, at: Date.now() };
      showVerdict(doc);
      setError(errorBox, "");
      return doc;
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) setError(errorBox, error.message);
      return null;
    } finally {
      verifyButton.disabled = false;
    }
  }

  function showVerdict(doc) {
    const count = Number(doc?.count ?? 0);
    const head = typeof doc?.head === "string" ? doc.head.slice(0, 12) : "";
    if (doc?.ok === true) {
      verdict.dataset.ok = "true";
      verdict.textContent =
        `Chain verified: ${count} ${count === 1 ? "entry" : "entries"} intact` +
        `${head ? `, head ${head}…` : ""}${doc.keyed ? " (keyed)" : ""}, at ${fmtStamp(Date.now())}.`;
    } else {
      verdict.dataset.ok = "false";
      const where = doc?.broken_at == null ? "" : ` at entry #${String(doc.broken_at)}`;
      const why = doc?.reason ? `: ${String(doc.reason)}` : "";
      verdict.textContent = `Chain BROKEN${where}${why}.`;
    }
  }

  function unverifiedNote() {
    if (!verified || verdict.dataset.ok !== "true") return;
    const behind = newest - Number(verified.count ?? 0);
    let note = verdict.querySelector(".behind");
    if (behind > 0) {
      if (!note) {
        note = h("span", { class: "behind" });
        verdict.append(note);
      }
      note.textContent = ` ${behind} newer ${behind === 1 ? "entry" : "entries"} not verified yet.`;
    } else if (note) note.remove();
  }

  /** Put one entry on top (the stream) or in order (a load); duplicates are dropped. */
  function add(entry, live = true) {
    if (!entry || !Number.isInteger(entry.seq) || seen.has(entry.seq)) return;
    seen.add(entry.seq);
    newest = Math.max(newest, entry.seq);
    const at = ms(entry.at);
    const outcome = String(entry.outcome ?? "");
    const tr = h(
      "tr",
      { class: live ? "fresh" : null, dataset: { seq: String(entry.seq) } },
      h("td", { class: "num", text: String(entry.seq) }),
      h("td", {}, at === null ? "" : h("time", { datetime: String(entry.at), text: fmtStamp(at) })),
      h("td", { text: String(entry.actor ?? "") }),
      h("td", { class: "mono", text: String(entry.action ?? "") }),
      h("td", { class: /^(refused|conflict|denied)/.test(outcome) ? "outcome-refused" : null, text: outcome }),
      h("td", { class: "mono", title: entry.hold_id == null ? null : String(entry.hold_id), text: short(entry.hold_id) }),
      h("td", { class: "mono", title: String(entry.hash ?? ""), text: String(entry.hash ?? "").slice(0, 10) }),
    );
    // Newest first: find the first row with a smaller seq.
    const after = [...rows.children].find((row) => Number(row.dataset.seq) < entry.seq);
    rows.insertBefore(tr, after ?? null);
    while (rows.children.length > KEPT) {
      seen.delete(Number(rows.lastElementChild.dataset.seq));
      rows.lastElementChild.remove();
    }
    unverifiedNote();
  }

  const refreshWorkflows = singleFlight(async () => {
    let doc;
    try {
      doc = await api("GET", "/v1/workflows");
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) setError(errorBox, error.message);
      return;
    }
    const items = Array.isArray(doc?.items) ? doc.items : [];
    workflowsEmpty.hidden = items.length > 0;
    workflowsBox.hidden = items.length === 0;
    fill(
      workflowRows,
      items.map((w) => {
        const last = ms(w?.last_replay_at);
        const storm = ms(w?.storm_at);
        return h(
          "tr",
          {},
          h("td", { class: "mono", text: String(w?.workflow_id ?? "") }),
          h("td", { class: "num", text: String(w?.replays ?? 0) }),
          h("td", { text: last === null ? "—" : fmtStamp(last) }),
          h("td", { text: `${String(w?.storms ?? 0)}${storm === null ? "" : ` (last ${fmtStamp(storm)})`}` }),
        );
      }),
    );
  });

  verifyButton.addEventListener("click", async () => {
    await verify();
    unverifiedNote();
  });

  return {
    load,
    add,
    refreshWorkflows,
    newest: () => newest,
    clear: () => {
      rows.replaceChildren();
      workflowRows.replaceChildren();
      seen.clear();
      newest = 0;
      verified = null;
      verdict.dataset.ok = "unknown";
      verdict.textContent = "Not verified yet.";
    },
  };
}

/** A long id cut for a table cell (the whole id is the cell's title). */
function short(id) {
  if (id == null) return "";
  const text = String(id);
  return text.length > 16 ? `${text.slice(0, 15)}…` : text;
}
