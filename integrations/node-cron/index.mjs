// @ts-check
// schedlock as node-cron v4's RunCoordinator: every tick of a `distributed: true` task runs on one node only.
//
// node-cron asks the coordinator `shouldRun('<task name>:<tick ISO time>', distributedLease)` before each tick and
// calls `onComplete(key)` after it. Here shouldRun is a slotted acquire (docs/slots.md): the lock is named after the
// task, the slot is the tick's time, lock_at_most_for is the lease. onComplete releases it, completing the tick, so a
// node whose trigger for the same tick comes later skips it (slot_done), however far apart the nodes' clocks are.
// node-cron does not tell onComplete whether the task threw: wrap the task in coordinator.job(fn) and a throw
// releases with completed: false, leaving the tick open for another node's trigger of it.
//
// When schedlock cannot be asked, shouldRun logs an error and throws: node-cron skips the tick (fail-closed) and
// emits execution:skipped with reason 'coordinator-error'. With failOpen: true it logs a warning and runs the tick
// without a lock instead. A 429 (this caller over its quota) skips the tick with a warning; a release answered 429
// is retried after its Retry-After while the lease lasts. Only the standard library: fetch, AbortSignal.timeout.

import { readFileSync, statSync } from 'node:fs';
import { hostname } from 'node:os';

/** @typedef {import('node-cron').RunCoordinator} RunCoordinator */
/** @typedef {import('node-cron').TaskContext} TaskContext */
/** @typedef {import('node-cron').Logger} Logger */
/**
 * @typedef {object} CoordinatorOptions
 * @property {string} [url] the service, default SCHEDLOCK_URL or http://127.0.0.1:8000
 * @property {string} [token] the API token, default SCHEDLOCK_TOKEN
 * @property {string} [tokenFile] a file holding the token, read again whenever it changes (a Kubernetes projected
 *   service-account token), default SCHEDLOCK_TOKEN_FILE; used when no token is given
 * @property {number} [timeoutMs] per request, default 10000
 * @property {string} [holder] who holds the lock, shown to other nodes, default "node-cron on HOST pid PID"
 * @property {(taskName: string) => string} [lockName] the lock of a task, default the task's name
 * @property {boolean} [failOpen] run the tick without a lock when schedlock cannot be asked, default false
 * @property {Pick<Logger, 'debug' | 'info' | 'warn' | 'error'>} [logger] default console
 */

/** The service could not be asked or did not answer: the lock's state is unknown. */
export class ServiceUnavailableError extends Error {
  /** @param {string} message @param {unknown} [cause] */
  constructor(message, cause) {
    super(message, { cause });
    this.name = 'ServiceUnavailableError';
  }
}

/** The service refused the request (a bad name, a missing or wrong token): a configuration bug, never a skip. */
export class RequestRejectedError extends Error {
  /**
   * @param {number} status @param {{ code: string, message: string, [field: string]: unknown }} detail
   * @param {number} [retryAfter] the Retry-After header, in seconds
   */
  constructor(status, detail, retryAfter) {
    super(`${status} ${detail.code}: ${detail.message}`);
    this.name = 'RequestRejectedError';
    this.status = status;
    this.code = detail.code;
    /** the error body's fields: code, message and what the code adds (locked_by, stale, last_completed_slot...) */
    this.detail = detail;
    /** @type {number | undefined} the Retry-After header in seconds (a 429 rate_limited, a 503), when sent */
    this.retryAfter = retryAfter;
  }
}

// node-cron's key: the task's name (any text, colons included), a colon, the tick as Date.toISOString() gives it.
const KEY = /^(.+):(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$/;

/**
 * The task's name and the tick of a node-cron coordination key.
 * @param {string} key @returns {{ task: string, tick: string }}
 */
export function parseKey(key) {
  const match = KEY.exec(key);
  if (match === null) throw new Error(`schedlock: not a node-cron coordination key: ${JSON.stringify(key)}`);
  return { task: match[1], tick: match[2] };
}

/**
 * A token kept in a file its platform rotates: read now (a missing file throws at once), and again whenever the
 * file's mtime, size or inode change (a projected volume swaps a symlink). A file unreadable after a good read keeps
 * the last token.
 */
export class TokenFile {
  #path;
  #state = '';
  #token = '';

  /** @param {string} path */
  constructor(path) {
    this.#path = path;
    this.#state = this.#read(true);
  }

  /** @returns {string} the current token */
  get token() {
    this.#state = this.#read(false);
    return this.#token;
  }

  /** @param {boolean} first @returns {string} */
  #read(first) {
    try {
      const st = statSync(this.#path, { bigint: true });
      const state = `${st.mtimeNs}:${st.size}:${st.ino}`;
      if (state !== this.#state) this.#token = readFileSync(this.#path, 'utf8').trim();
      return state;
    } catch (error) {
      if (first) throw error;
      return this.#state;
    }
  }
}

/** @implements {RunCoordinator} */
export class SchedlockCoordinator {
  #url;
  /** @type {string | TokenFile | undefined} */
  #token;
  #timeoutMs;
  #holder;
  #lockName;
  #failOpen;
  #logger;
  /**
   * Ticks running here; deadline: lockUntil by performance.now(), counted from the acquire's start (never later).
   * @type {Map<string, { name: string, token: string, lockUntil: string, deadline: number, failed: boolean }>}
   */
  #leases = new Map();

  /** @param {CoordinatorOptions} [options] */
  constructor({
    url = process.env.SCHEDLOCK_URL || 'http://127.0.0.1:8000',
    token = process.env.SCHEDLOCK_TOKEN,
    tokenFile = process.env.SCHEDLOCK_TOKEN_FILE,
    timeoutMs = 10_000,
    holder = `node-cron on ${hostname()} pid ${process.pid}`,
    lockName = (taskName) => taskName,
    failOpen = false,
    logger = console,
  } = {}) {
    this.#url = url.replace(/\/+$/, '');
    this.#token = token || (tokenFile ? new TokenFile(tokenFile) : undefined);
    this.#timeoutMs = timeoutMs;
    this.#holder = holder;
    this.#lockName = lockName;
    this.#failOpen = failOpen;
    this.#logger = logger;
  }

  /**
   * Takes the tick: true to run it, false when another node runs it or ran it. Throws when schedlock cannot be asked
   * (unless failOpen) or refuses the request, and node-cron skips the tick with reason 'coordinator-error'.
   * @param {string} key @param {number} ttlMs @returns {Promise<boolean>}
   */
  async shouldRun(key, ttlMs) {
    const { task, tick } = parseKey(key);
    const name = this.#lockName(task);
    const request = { lock_at_most_for: ttlMs, lock_at_least_for: 0, holder: this.#holder, slot: tick };
    let acquired;
    const sent = performance.now();
    try {
      acquired = await this.#call(`${path(name)}/acquire`, request);
    } catch (error) {
      if (error instanceof RequestRejectedError && error.code === 'lock_held') {
        this.#logger.debug(`schedlock: ${name} is held by another node: tick ${tick} skipped`);
        return false;
      }
      if (error instanceof RequestRejectedError && error.code === 'slot_done' && error.detail.stale === true) {
        // A late trigger (a paused process, a clock behind): a newer tick has completed since (docs/slots.md).
        const last = error.detail.last_completed_slot;
        this.#logger.info(`schedlock: tick ${tick} of ${name} is stale, older than its last completed tick ${last}: skipped`);
        return false;
      }
      if (error instanceof RequestRejectedError && error.code === 'slot_done') {
        this.#logger.debug(`schedlock: tick ${tick} of ${name} was already run: skipped`);
        return false;
      }
      if (error instanceof RequestRejectedError && error.code === 'rate_limited') {
        // Over this caller's quota (docs/auth.md): no verdict on the lock and no outage; another node may run it.
        const after = error.retryAfter === undefined ? '' : `, retry after ${error.retryAfter} s`;
        this.#logger.warn(`schedlock: tick ${tick} of ${name} skipped: over this caller's quota (429 rate_limited${after})`);
        return false;
      }
      if (error instanceof ServiceUnavailableError && this.#failOpen) {
        this.#logger.warn(`schedlock: ${error.message}; running tick ${tick} of ${task} WITHOUT a lock (failOpen)`);
        return true;
      }
      const why = error instanceof Error ? error.message : String(error);
      this.#logger.error(`schedlock: tick ${tick} of ${task} NOT run (fail-closed): ${why}`);
      throw error;
    }
    const lease = /** @type {{ token: string, lock_until: string }} */ (acquired);
    this.#leases.set(key, { name, token: lease.token, lockUntil: lease.lock_until, deadline: sent + ttlMs, failed: false });
    return true;
  }

  /**
   * Releases the tick's lock: completed, unless the task wrapped in job() threw. Never throws; a release that cannot
   * be sent is logged, and the lock frees itself at lock_until. Tried three times while schedlock cannot be asked,
   * and after each 429 (over the caller's quota) its Retry-After later, as long as the lease lasts.
   * @param {string} key @returns {Promise<void>}
   */
  async onComplete(key) {
    const lease = this.#leases.get(key);
    if (lease === undefined) return; // ran without a lock (failOpen)
    this.#leases.delete(key);
    const request = { token: lease.token, completed: !lease.failed };
    for (let attempt = 1; ; ) {
      let pauseMs;
      try {
        await this.#call(`${path(lease.name)}/release`, request);
        return;
      } catch (error) {
        const why = error instanceof Error ? error.message : String(error);
        if (error instanceof RequestRejectedError && error.code === 'not_holder') {
          this.#logger.warn(`schedlock: ${lease.name} expired and was taken over before ${key} ended: ${why}`);
          return;
        }
        if (error instanceof RequestRejectedError && error.code === 'rate_limited') {
          pauseMs = (error.retryAfter ?? 1) * 1000; // no verdict on the lease: again, if before it ends
          if (performance.now() + pauseMs >= lease.deadline) {
            this.#logger.warn(`schedlock: could not release ${lease.name} before its lease ended; it frees itself at ${lease.lockUntil}: ${why}`);
            return;
          }
          this.#logger.info(`schedlock: release of ${lease.name} over this caller's quota: retrying in ${pauseMs} ms`);
        } else if (!(error instanceof ServiceUnavailableError) || attempt === 3) {
          this.#logger.warn(`schedlock: could not release ${lease.name}; it frees itself at ${lease.lockUntil}: ${why}`);
          return;
        } else {
          pauseMs = 200 * attempt++;
        }
      }
      await new Promise((resolve) => setTimeout(resolve, pauseMs));
    }
  }

  /**
   * The task function for cron.schedule: runs fn, and when it throws, marks the tick failed, so that onComplete
   * leaves it open for another node's trigger of the same tick. The error goes on to node-cron.
   * @template T
   * @param {(context: TaskContext) => T | Promise<T>} fn
   * @returns {(context: TaskContext) => Promise<T>}
   */
  job(fn) {
    return async (context) => {
      try {
        return await fn(context);
      } catch (error) {
        const lease = context.task?.name && this.#leases.get(`${context.task.name}:${context.date.toISOString()}`);
        if (lease) lease.failed = true;
        throw error;
      }
    };
  }

  /** One POST; the 200 answer's JSON, else RequestRejectedError or ServiceUnavailableError. @param {string} target @param {object} body */
  async #call(target, body) {
    /** @type {Record<string, string>} */
    const headers = { accept: 'application/json', 'content-type': 'application/json' };
    const token = typeof this.#token === 'string' ? this.#token : this.#token?.token;
    if (token) headers.authorization = `Bearer ${token}`;
    let response, json;
    try {
      const signal = AbortSignal.timeout(this.#timeoutMs);
      response = await fetch(this.#url + target, { method: 'POST', headers, body: JSON.stringify(body), signal });
      json = await response.json();
    } catch (error) {
      const cause = error instanceof Error && error.cause instanceof Error ? ` (${error.cause.message})` : '';
      throw new ServiceUnavailableError(`lock service unreachable at ${this.#url}: ${error}${cause}`, error);
    }
    if (response.status === 200) return json;
    const detail = json?.error;
    if (response.status >= 500 || typeof detail?.code !== 'string') {
      throw new ServiceUnavailableError(`lock service at ${this.#url} answered ${response.status}`);
    }
    const retryAfter = Number(response.headers.get('retry-after') ?? Number.NaN);
    throw new RequestRejectedError(response.status, detail, Number.isFinite(retryAfter) ? retryAfter : undefined);
  }
}

/** @param {string} name */
function path(name) {
  return `/v1/locks/${encodeURIComponent(name)}`;
}
