// Instants arrive as UTC ISO-8601 with Z; the page shows them in the browser's
// own time zone, which it names.

export const MINUTE = 60_000;
export const HOUR = 60 * MINUTE;
export const DAY = 24 * HOUR;

export const ZONE = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";

const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
const stamp = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
});
const day = new Intl.DateTimeFormat(undefined, { weekday: "short", month: "short", day: "numeric" });
const longDay = new Intl.DateTimeFormat(undefined, {
  weekday: "long", year: "numeric", month: "long", day: "numeric",
});
const hourOnly = new Intl.DateTimeFormat(undefined, { hour: "2-digit" });

/** Milliseconds since the epoch, or null for anything that is not an instant. */
export function ms(iso) {
  if (typeof iso !== "string") return null;
  const t = Date.parse(iso);
  return Number.isNaN(t) ? null : t;
}

/** The API's form: UTC, second precision, Z. */
export function iso(t) {
  return new Date(t).toISOString().replace(/\.\d{3}Z$/, "Z");
}

export const fmtClock = (t) => clock.format(t);
export const fmtStamp = (t) => stamp.format(t);
export const fmtDay = (t) => day.format(t);
export const fmtLongDay = (t) => longDay.format(t);
export const fmtHour = (t) => hourOnly.format(t);

/** "09:00–09:30", with the day when the interval crosses midnight. */
export function fmtSpan(start, end) {
  const sameDay = new Date(start).toDateString() === new Date(end - 1).toDateString();
  return sameDay
    ? `${fmtDay(start)} ${fmtClock(start)}–${fmtClock(end)}`
    : `${fmtStamp(start)} – ${fmtStamp(end)}`;
}

/** "5 min ago", "in 2 h", "just now". */
export function relative(t, now = Date.now()) {
  const diff = t - now;
  const abs = Math.abs(diff);
  if (abs < 45_000) return "just now";
  let amount;
  if (abs < HOUR) amount = `${Math.round(abs / MINUTE)} min`;
  else if (abs < DAY) amount = `${Math.round(abs / HOUR)} h`;
  else amount = `${Math.round(abs / DAY)} d`;
  return diff < 0 ? `${amount} ago` : `in ${amount}`;
}

/** Local midnight of the day holding `date`. */
export function startOfDay(date) {
  return new Date(date.getFullYear(), date.getMonth(), date.getDate());
}

/** Local midnight of the Monday of `date`'s week. */
export function startOfWeek(date) {
  const d = startOfDay(date);
  return addDays(d, -((d.getDay() + 6) % 7));
}

/** Calendar days later (a local day may be 23 or 25 hours long). */
export function addDays(date, n) {
  return new Date(date.getFullYear(), date.getMonth(), date.getDate() + n);
}

/** YYYY-MM-DD of a local date, as `<input type="date">` takes it. */
export function dateValue(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
}

/** A local date from YYYY-MM-DD, or null. */
export function parseDateValue(text) {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(text || "");
  if (!m) return null;
  const d = new Date(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return Number.isNaN(d.getTime()) ? null : d;
}
