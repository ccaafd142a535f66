// Talking to slotward's API with the session cookie. The API key is sent once,
// in the body of POST /v1/session; after that the HttpOnly cookie goes along by
// itself, and every request that is not a GET carries the session's CSRF token.

let csrfToken = null;
let onSignedOut = () => {};

/** A problem+json answer (or no answer at all: status 0). */
export class ApiError extends Error {
  constructor(status, problem) {
    const detail = (problem && typeof problem.detail === "string" && problem.detail) || "";
    super(detail || `HTTP ${status}`);
    this.status = status;
    this.code = (problem && typeof problem.code === "string" && problem.code) || "";
    this.detail = detail;
  }
}

export function setCsrfToken(token) {
  csrfToken = token;
}

/** Called once a request answers 401: the session has ended. */
export function whenSignedOut(callback) {
  onSignedOut = callback;
}

/**
 * Call the API; resolve to the decoded JSON body (null for 204), or reject
 * with an ApiError. A 401 also tells whenSignedOut's callback, unless `quiet`.
 */
export async function api(method, path, body = undefined, { quiet = false } = {}) {
  const headers = { Accept: "application/json, application/problem+json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && method !== "HEAD" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
      redirect: "error",
    });
  } catch {
    throw new ApiError(0, { detail: "The server could not be reached." });
  }
  const text = await resp.text();
  let doc = null;
  try {
    doc = text ? JSON.parse(text) : null;
  } catch {
    doc = null;
  }
  if (!resp.ok) {
    const error = new ApiError(resp.status, doc);
    if (resp.status === 401 && !quiet) onSignedOut(error);
    throw error;
  }
  return doc;
}

/** A path with its query: `path("/v1/x", {a: 1, b: ["p", "q"]})`; nulls left out. */
export function path(base, query = {}) {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    for (const one of Array.isArray(value) ? value : [value]) {
      if (one !== null && one !== undefined && one !== "") params.append(name, String(one));
    }
  }
  const qs = params.toString();
  return qs ? `${base}?${qs}` : base;
}

/** A path segment from the API's data, encoded. */
export function seg(value) {
  return encodeURIComponent(String(value));
}

/** Run `fn` one call at a time; a call made meanwhile runs it once more afterwards. */
export function singleFlight(fn) {
  let running = null;
  let again = false;
  return function run() {
    if (running) {
      again = true;
      return running;
    }
    running = (async () => {
      try {
        do {
          again = false;
          await fn();
        } while (again);
      } finally {
        running = null;
      }
    })();
    return running;
  };
}
