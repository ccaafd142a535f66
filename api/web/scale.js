// The timeline's horizontal axis. A day, or each day of a week, is drawn from
// 07:00 to 20:00, widened to the whole hours of anything booked outside them
// (every day of a week gets the same hours), so nothing is ever hidden and a
// half-hour meeting is still wide enough to see. Nights between a week's days
// are left out; a time maps to a fraction of the track's width.

import { addDays, fmtClock, fmtDay } from "./time.js";

const FIRST_HOUR = 7;
const LAST_HOUR = 20;

/** Local time `hour` o'clock of `day` (24: the next midnight). */
function at(day, hour) {
  return hour >= 24
    ? addDays(day, 1).getTime()
    : new Date(day.getFullYear(), day.getMonth(), day.getDate(), hour).getTime();
}

function hourCeil(t) {
  const d = new Date(t);
  const partial = d.getMinutes() || d.getSeconds() || d.getMilliseconds();
  return d.getHours() + (partial ? 1 : 0);
}

/** The hours to draw of each day: [first, last). */
function hours(days, spans) {
  let first = FIRST_HOUR;
  let last = LAST_HOUR;
  for (const [s, e] of spans) {
    for (const day of days) {
      const start = day.getTime();
      const end = addDays(day, 1).getTime();
      if (e <= start || s >= end) continue;
      first = Math.min(first, s <= start ? 0 : new Date(s).getHours());
      last = Math.max(last, e >= end ? 24 : hourCeil(e));
    }
  }
  return [first, last];
}

/**
 * The axis of a "day" or "week" view starting at local midnight `from`, over
 * the `spans` ([start, end] in ms) it must show: `x(t)` in [0, 1], and ticks.
 */
export function makeScale(view, from, spans) {
  const days = Array.from({ length: view === "week" ? 7 : 1 }, (_, i) => addDays(new Date(from), i));
  const [first, last] = hours(days, spans);
  const segments = days.map((day) => ({ day, start: at(day, first), end: at(day, last) }));
  const n = segments.length;

  function x(t) {
    for (let i = 0; i < n; i += 1) {
      const seg = segments[i];
      if (t < seg.start) return i / n;
      if (t < seg.end) return (i + (t - seg.start) / (seg.end - seg.start)) / n;
    }
    return 1;
  }

  const ticks = [];
  const labelEvery = view === "day" && last - first > 14 ? 2 : 1;
  for (const seg of segments) {
    for (let hour = first; hour < last; hour += 1) {
      const t = at(seg.day, hour);
      if (view === "week") {
        if (hour === first) ticks.push({ t, major: true, label: fmtDay(t) });
        else if (hour % 3 === 0) ticks.push({ t, major: false, label: null });
      } else {
        ticks.push({ t, major: false, label: (hour - first) % labelEvery === 0 ? fmtClock(t) : null });
      }
    }
  }
  return { x, ticks, start: segments[0].start, end: segments[n - 1].end };
}
