// The lock API as the page calls it: the token from sessionStorage as a bearer header, no cookies, and the
// database's clock, learnt from the db_time of every answer.

const TOKEN_KEY = "schedlock.token";
export const base = document.body.dataset.base || "";
export const tokensRequired = document.body.dataset.auth === "tokens";

let skewMs = 0; // database time minus browser time
let skewKnown = false; // until the database has answered once, the page does not claim to know its time
let onRefused = () => {};

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY),
  set: (value) => sessionStorage.setItem(TOKEN_KEY, value),
  forget: () => sessionStorage.removeItem(TOKEN_KEY),
};

/** Called with the server's reason when it refuses the token (401). */
export function whenRefused(callback) {
  onRefused = callback;
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

/** Calls the API; resolves to the answer's JSON, or rejects with an ApiError carrying the server's code. */
export async function api(path, { method = "GET", json } = {}) {
  const headers = { Accept: "application/json" };
  const secret = token.get();
  if (secret) headers.Authorization = `Bearer ${secret}`;
  if (json !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(base + path, {
      method,
      headers,
      body: json === undefined ? undefined : JSON.stringify(json),
      credentials: "omit",
      cache: "no-store",
    });
  } catch {
    throw new ApiError(0, "network", "the server did not answer");
  }
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null; // not JSON (a proxy's error page): the status alone speaks
  }
  if (data && data.db_time) {
    skewMs = Date.parse(data.db_time) - Date.now();
    skewKnown = true;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    const failure = new ApiError(response.status, error.code, error.message);
    if (response.status === 401 && tokensRequired) onRefused(failure.message);
    throw failure;
  }
  return data;
}

export const lockPath = (name) => `/v1/locks/${encodeURIComponent(name)}`;
/** The database's time now (ms since the epoch), or null before the database first answered. */
export const dbNow = () => (skewKnown ? Date.now() + skewMs : null);
