// slotward's dashboard: sign in with a reviewer's or an admin's key, then the
// approval queue, the timeline, the audit stream and (admins) the webhooks,
// kept current by the audit stream. No framework, no build step, nothing
// fetched from elsewhere; the page's CSP allows scripts and styles from this
// origin only.

import { createAdmin } from "./admin.js";
import { api, ApiError, setCsrfToken, whenSignedOut } from "./api.js";
import { createApprovals, tickTimes } from "./approvals.js";
import { createAudit } from "./audit.js";
import { byId, setError } from "./dom.js";
import { connectLive } from "./live.js";
import { createTimeline } from "./timeline.js";

const SIGN_IN_REFUSALS = {
  role_forbidden: "This key may not sign in here: only reviewer and admin keys may. Agents' keys are refused.",
  unauthenticated: "This key was not accepted.",
  rate_limited: "Too many attempts: wait a moment, then try again.",
};
const LIVE_TEXT = {
  off: "Not connected",
  live: "Live",
  reconnecting: "Reconnecting…",
  offline: "Offline: retrying",
};
const DEBOUNCE_MS = 150;

const announcer = byId("announce");
function announce(text) {
  // A fresh node each time, so a screen reader reads a repeated message too.
  announcer.textContent = "";
  announcer.append(document.createTextNode(text));
}

const approvals = createApprovals({ announce, onDecided: () => schedule("timeline", "workflows") });
const timeline = createTimeline();
const audit = createAudit();
const admin = createAdmin({ announce });
const panels = {
  approvals: approvals.refresh,
  timeline: timeline.refresh,
  workflows: audit.refreshWorkflows,
  admin: admin.refresh,
};

let live = null;
let ticker = null;
let signedIn = false;

// Refreshes asked for within a short while are done once.
const due = new Set();
let debounce = null;
function schedule(...names) {
  names.forEach((n) => due.add(n));
  if (debounce === null) {
    debounce = setTimeout(() => {
      debounce = null;
      const names = [...due];
      due.clear();
      names.forEach((n) => panels[n]());
    }, DEBOUNCE_MS);
  }
}

/** Which panels an audit entry touches. */
function affected(action) {
  const family = String(action ?? "").split(".")[0];
  switch (family) {
    case "hold":
      return ["timeline", "workflows", "approvals"];
    case "approval":
    case "approval_policy":
      return ["approvals", "timeline"];
    case "calendar":
      return ["timeline"];
    case "webhook":
    case "outbox":
      return ["admin"];
    case "workflow":
      return ["workflows"];
    default:
      return ["workflows"];
  }
}

function setLive(state) {
  const el = byId("live");
  el.dataset.state = state;
  byId("live-text").textContent = LIVE_TEXT[state] || state;
}

async function start(session) {
  signedIn = true;
  setCsrfToken(session.csrf_token);
  byId("signin").hidden = true;
  byId("app").hidden = false;
  byId("who").hidden = false;
  byId("who-text").textContent =
    `${String(session.agent_id ?? "")} · ${String(session.role ?? "")} · tenant ${String(session.tenant ?? "")}`;
  admin.enable(session.role === "admin");
  // The audit's head first: every change after it reaches the page through the
  // stream, which starts from there, so nothing falls between a load and the stream.
  let after = 0;
  try {
    after = await audit.load();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return;
  }
  if (!signedIn) return;
  await Promise.all([approvals.refresh(), timeline.refresh(), audit.refreshWorkflows(), admin.refresh()]);
  if (!signedIn) return;
  live = connectLive({
    after,
    onEntry: (entry) => {
      audit.add(entry);
      schedule(...affected(entry?.action));
    },
    onState: setLive,
    onReopen: () => schedule("approvals", "timeline", "workflows", "admin"),
    stillSignedIn: async () => {
      try {
        await api("GET", "/v1/session");
        return true;
      } catch (error) {
        if (error instanceof ApiError && error.status === 401) return false;
        throw error;
      }
    },
  });
  ticker = setInterval(() => tickTimes(), 30_000);
}

function stop() {
  signedIn = false;
  setCsrfToken(null);
  if (live) live.stop();
  live = null;
  clearInterval(ticker);
  ticker = null;
  setLive("off");
  approvals.clear();
  timeline.clear();
  audit.clear();
  admin.enable(false);
}

function showSignIn(message = "") {
  stop();
  byId("app").hidden = true;
  byId("who").hidden = true;
  byId("signin").hidden = false;
  setError(byId("signin-error"), message);
  byId("signin-key").focus();
}

whenSignedOut(() => {
  if (signedIn) showSignIn("Your session has ended: sign in again.");
});

byId("signin-form").addEventListener("submit", async (event) => {
  event.preventDefault(); // the CSP's form-action 'none': a form never navigates
  const input = byId("signin-key");
  const button = byId("signin-submit");
  const key = input.value.trim();
  const errorBox = byId("signin-error");
  if (!key) {
    setError(errorBox, "Enter an API key.");
    input.focus();
    return;
  }
  button.disabled = true;
  setError(errorBox, "");
  try {
    const session = await api("POST", "/v1/session", { key }, { quiet: true });
    input.value = "";
    await start(session);
    byId("main").focus({ preventScroll: true });
  } catch (error) {
    input.select();
    const known = error instanceof ApiError ? SIGN_IN_REFUSALS[error.code] : null;
    const fallback = error instanceof ApiError && error.status === 401 ? "This key was not accepted." : null;
    setError(errorBox, known || fallback || (error instanceof Error ? error.message : String(error)));
  } finally {
    button.disabled = false;
  }
});

byId("sign-out").addEventListener("click", async () => {
  try {
    await api("DELETE", "/v1/session", undefined, { quiet: true });
  } catch {
    // Signed out either way: the cookie is gone or no longer valid.
  }
  showSignIn();
});

(async () => {
  try {
    const session = await api("GET", "/v1/session", undefined, { quiet: true });
    await start(session);
  } catch (error) {
    showSignIn(error instanceof ApiError && error.status !== 401 ? error.message : "");
  }
})();
