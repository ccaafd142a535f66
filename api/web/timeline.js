// The timeline: one row per attendee over a day or a week, holds as blocks
// placed by time and coloured by status, external busy time as a shade behind
// them. The view (span, date, added attendees) lives in the URL's fragment, so
// a view can be bookmarked; it holds no secret.

import { api, ApiError, path, singleFlight } from "./api.js";
import { byId, fill, h, setError } from "./dom.js";
import { makeScale } from "./scale.js";
import {
  ZONE, addDays, dateValue, fmtDay, fmtLongDay, fmtSpan, fmtStamp, iso, ms, parseDateValue,
  startOfDay, startOfWeek,
} from "./time.js";

const STATUSES = new Set(["held", "committed", "released", "expired", "preempted"]);
const LANE_PX = 30;

export function createTimeline() {
  const grid = byId("timeline-grid");
  const rangeText = byId("timeline-range");
  const errorBox = byId("timeline-error");
  const truncated = byId("timeline-truncated");
  const emptyNote = byId("timeline-empty");
  const detail = byId("hold-detail");
  const chips = byId("attendee-chips");
  const datePick = byId("date-pick");
  const dayButton = byId("view-day");
  const weekButton = byId("view-week");

  const state = { view: "day", date: startOfDay(new Date()), attendees: [] };
  const statuses = new Map(); // hold id -> status last shown, to flag changes
  let holdsById = new Map();
  let pinned = null; // the hold id whose detail stays (clicked)

  readFragment();

  function readFragment() {
    const params = new URLSearchParams(location.hash.slice(1));
    state.view = params.get("view") === "week" ? "week" : "day";
    state.date = parseDateValue(params.get("date")) || startOfDay(new Date());
    state.attendees = params.getAll("attendee").filter((a) => a.trim()).slice(0, 50);
  }

  function writeFragment() {
    const params = new URLSearchParams();
    params.set("view", state.view);
    params.set("date", dateValue(state.date));
    state.attendees.forEach((a) => params.append("attendee", a));
    history.replaceState(null, "", `#${params}`);
  }

  function range() {
    const from = state.view === "week" ? startOfWeek(state.date) : startOfDay(state.date);
    const to = addDays(from, state.view === "week" ? 7 : 1);
    return { from: from.getTime(), to: to.getTime() };
  }

  const refresh = singleFlight(async () => {
    const { from, to } = range();
    let doc;
    try {
      doc = await api("GET", path("/v1/timeline", { from: iso(from), to: iso(to), attendee: state.attendees }));
    } catch (error) {
      if (error instanceof ApiError && error.status !== 401) setError(errorBox, error.message);
      return;
    }
    setError(errorBox, "");
    render(doc, from, to);
  });

  function showControls() {
    const { from, to } = range();
    dayButton.setAttribute("aria-pressed", String(state.view === "day"));
    weekButton.setAttribute("aria-pressed", String(state.view === "week"));
    datePick.value = dateValue(state.date);
    rangeText.textContent =
      state.view === "day"
        ? `${fmtLongDay(from)} · ${ZONE}`
        : `${fmtDay(from)} – ${fmtDay(to - 1)} · ${ZONE}`;
    fill(
      chips,
      state.attendees.map((a) =>
        h(
          "li",
          {},
          h("span", { text: a }),
          h("button", {
            type: "button",
            "aria-label": `Remove ${a} from the view`,
            text: "×",
            onclick: () => setAttendees(state.attendees.filter((x) => x !== a)),
          }),
        ),
      ),
    );
  }

  function change(mutate) {
    mutate();
    writeFragment();
    showControls();
    refresh();
  }

  const setView = (view) => change(() => { state.view = view; });
  const setDate = (date) => change(() => { state.date = startOfDay(date); });
  const setAttendees = (list) => change(() => { state.attendees = list; });
  const step = (n) => setDate(addDays(state.date, n * (state.view === "week" ? 7 : 1)));

  dayButton.addEventListener("click", () => setView("day"));
  weekButton.addEventListener("click", () => setView("week"));
  byId("date-prev").addEventListener("click", () => step(-1));
  byId("date-next").addEventListener("click", () => step(1));
  byId("date-today").addEventListener("click", () => setDate(new Date()));
  datePick.addEventListener("change", () => {
    const d = parseDateValue(datePick.value);
    if (d) setDate(d);
  });
  byId("attendee-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const input = byId("attendee-input");
    const value = input.value.trim();
    if (!value) return;
    input.value = "";
    if (!state.attendees.includes(value)) setAttendees([...state.attendees, value]);
  });
  window.addEventListener("hashchange", () => {
    readFragment();
    showControls();
    refresh();
  });
  showControls();

  function render(doc, from, to) {
    const attendees = Array.isArray(doc?.attendees) ? doc.attendees : [];
    holdsById = new Map();
    for (const a of attendees) {
      for (const hold of Array.isArray(a?.holds) ? a.holds : []) {
        if (hold && typeof hold.id === "string") holdsById.set(hold.id, hold);
      }
    }
    truncated.hidden = doc?.truncated !== true;
    emptyNote.hidden = attendees.length > 0;
    grid.className = `grid ${state.view}`;
    const scale = makeScale(state.view, from, spans(attendees, from, to));
    const rows = [scaleRow(scale)];
    for (const attendee of attendees) rows.push(attendeeRow(attendee, scale, from, to));
    const focused = focusedHold();
    fill(grid, rows);
    if (focused) refocus(focused);
    for (const hold of holdsById.values()) statuses.set(hold.id, hold.status);
    if (pinned && holdsById.has(pinned)) showDetail(holdsById.get(pinned));
  }

  /** The hold block that has the focus, by hold and row: a redraw gives it back. */
  function focusedHold() {
    const el = document.activeElement;
    if (!(el instanceof HTMLElement) || !grid.contains(el) || !el.dataset.holdId) return null;
    const row = el.closest(".tl-row");
    return { id: el.dataset.holdId, row: [...grid.children].indexOf(row) };
  }

  function refocus({ id, row }) {
    const blocks = [...grid.querySelectorAll(".hold")].filter((b) => b.dataset.holdId === id);
    const same = blocks.find((b) => [...grid.children].indexOf(b.closest(".tl-row")) === row);
    const target = same || blocks[0];
    if (target) target.focus({ preventScroll: true });
  }

  function scaleRow(scale) {
    const track = h("div", { class: "tl-track" });
    for (const tick of scale.ticks) {
      track.append(place(h("div", { class: tick.major ? "tick major" : "tick" }), scale, tick.t));
      if (tick.label) track.append(place(h("span", { class: "tick-label", text: tick.label }), scale, tick.t));
    }
    return h(
      "div",
      { class: "tl-row scale", "aria-hidden": "true" },
      h("div", { class: "tl-label", text: "Attendee" }),
      track,
    );
  }

  function attendeeRow(attendee, scale, from, to) {
    const track = h("div", { class: "tl-track" });
    const name = String(attendee?.name || attendee?.id || "");
    const emails = Array.isArray(attendee?.emails) ? attendee.emails.map(String) : [];
    const sub = emails[0] && emails[0] !== name ? emails[0] : attendee?.name ? String(attendee.id) : "";
    for (const tick of scale.ticks) {
      track.append(place(h("div", { class: tick.major ? "tick major" : "tick" }), scale, tick.t));
    }
    const asOf = ms(attendee?.external_as_of);
    for (const busy of Array.isArray(attendee?.external) ? attendee.external : []) {
      const s = ms(busy?.start);
      const e = ms(busy?.end);
      if (s === null || e === null || e <= from || s >= to) continue;
      const label = `Busy elsewhere ${fmtSpan(s, e)}${asOf === null ? "" : `, as of ${fmtStamp(asOf)}`}`;
      const shade = h("div", { class: "busy external", title: label, role: "img", "aria-label": label });
      track.append(place(shade, scale, s, e));
    }
    const holds = (Array.isArray(attendee?.holds) ? attendee.holds : [])
      .map((hold) => ({ hold, s: ms(hold?.start), e: ms(hold?.end) }))
      .filter(({ hold, s, e }) => hold && s !== null && e !== null && e > from && s < to)
      .sort((a, b) => a.s - b.s || a.e - b.e);
    const laneEnds = [];
    for (const item of holds) {
      let lane = laneEnds.findIndex((end) => end <= item.s);
      if (lane < 0) lane = laneEnds.push(0) - 1;
      laneEnds[lane] = item.e;
      const block = place(holdBlock(item.hold, item.s, item.e), scale, item.s, item.e);
      block.style.top = `${5 + lane * LANE_PX}px`;
      track.append(block);
    }
    track.style.height = `${10 + Math.max(1, laneEnds.length) * LANE_PX}px`;
    const now = Date.now();
    if (now >= scale.start && now < scale.end) {
      track.append(place(h("div", { class: "now-line", "aria-hidden": "true" }), scale, now));
    }
    return h(
      "div",
      { class: "tl-row", role: "group", "aria-label": name },
      h(
        "div",
        { class: "tl-label" },
        h("span", { class: "name", text: name }),
        sub ? h("span", { class: "sub", text: sub }) : null,
      ),
      track,
    );
  }

  function holdBlock(hold, s, e) {
    const status = STATUSES.has(hold.status) ? hold.status : "held";
    const title = String(hold.title ?? "");
    const by = typeof hold.preempted_by === "string" ? hold.preempted_by : null;
    const byHold = by ? holdsById.get(by) : null;
    const byText = by ? `, preempted by ${byHold ? `“${String(byHold.title ?? "")}” (${by})` : by}` : "";
    const label = `${title}: ${status}, ${fmtSpan(s, e)}, agent ${String(hold.agent_id ?? "")}${byText}`;
    const changed = statuses.has(hold.id) && statuses.get(hold.id) !== status;
    const block = h(
      "button",
      {
        type: "button",
        class: `hold st-${status}${changed ? " changed" : ""}`,
        title: label,
        "aria-label": label,
        dataset: { holdId: String(hold.id), status },
      },
      h("span", { class: "hold-title", text: title }),
    );
    const show = () => showDetail(hold);
    block.addEventListener("focus", show);
    block.addEventListener("mouseenter", show);
    block.addEventListener("click", () => {
      pinned = hold.id;
      show();
    });
    return block;
  }

  function showDetail(hold) {
    const s = ms(hold.start);
    const e = ms(hold.end);
    const status = STATUSES.has(hold.status) ? hold.status : String(hold.status ?? "");
    const rows = [
      ["Status", h("span", { class: "status", text: status })],
      ["When", s !== null && e !== null ? fmtSpan(s, e) : ""],
      ["Attendees", Array.isArray(hold.attendees) ? hold.attendees.map(String).join(", ") : ""],
      ["Agent", `${String(hold.agent_id ?? "")} (priority ${String(hold.priority ?? "")})`],
      ["Workflow", String(hold.workflow_id ?? "")],
      ["Hold", h("span", { class: "mono", text: String(hold.id) })],
    ];
    if (status === "held" && ms(hold.expires_at) !== null) rows.push(["Expires", fmtStamp(ms(hold.expires_at))]);
    if (ms(hold.committed_at) !== null) rows.push(["Committed", fmtStamp(ms(hold.committed_at))]);
    if (typeof hold.preempted_by === "string") {
      const by = holdsById.get(hold.preempted_by);
      rows.push([
        "Preempted by",
        by
          ? `“${String(by.title ?? "")}” of ${String(by.agent_id ?? "")} (priority ${String(by.priority ?? "")}), ${hold.preempted_by}`
          : hold.preempted_by,
      ]);
    }
    fill(
      detail,
      h("h3", { text: String(hold.title ?? "") }),
      h("dl", { class: "meta" }, rows.map(([k, v]) => [h("dt", { text: k }), h("dd", {}, v)])),
    );
  }

  return {
    refresh,
    clear: () => {
      grid.replaceChildren();
      statuses.clear();
      pinned = null;
    },
  };
}

/** Every booked or busy interval of the range, as [start, end] in ms. */
function spans(attendees, from, to) {
  const out = [];
  for (const attendee of attendees) {
    const items = [
      ...(Array.isArray(attendee?.holds) ? attendee.holds : []),
      ...(Array.isArray(attendee?.external) ? attendee.external : []),
    ];
    for (const item of items) {
      const s = ms(item?.start);
      const e = ms(item?.end);
      if (s !== null && e !== null && e > from && s < to) out.push([s, e]);
    }
  }
  return out;
}

/** Put an element on a track at `start` (and as wide as to `end`); answers it. */
function place(el, scale, start, end = null) {
  const left = scale.x(start);
  el.style.left = `${(left * 100).toFixed(4)}%`;
  if (end !== null) el.style.width = `${(Math.max(0, scale.x(end) - left) * 100).toFixed(4)}%`;
  return el;
}
