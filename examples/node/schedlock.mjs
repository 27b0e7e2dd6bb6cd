// @ts-check
// schedlock for Node.js 20+: one ES module, no dependencies (the built-in fetch). Copy it into your project.
//
//   import { withLock } from './schedlock.mjs';
//   await withLock('nightly-report', { lockAtMostFor: '14m', lockAtLeastFor: '5m' }, sendReport);
//
// The job is skipped, never waited for, when another node holds the lock: withLock resolves to
// { executed: false, reason: 'held' } (else { executed: true, result }, ShedLock's TaskResult). When the service
// cannot be asked, the job is skipped too (reason 'unavailable', fail-closed) and an error is logged: nobody runs
// while the lock's state is unknown. A request the service rejects (bad name or duration, missing or wrong token) throws
// RequestRejectedError: a configuration bug is never mistaken for "held". SCHEDLOCK_URL and SCHEDLOCK_TOKEN are
// read when a client is made. The types come from the service's OpenAPI document (schedlock-api.d.ts).
//
// Once per tick (docs/slots.md): with { oncePer: '0 3 * * *', oncePerTimezone: 'Europe/Berlin' } (or a key of
// your own, { slot: '2026-11-30' }) the job runs at most once per tick of the schedule, by the database's clock:
// a tick already done resolves to { executed: false, reason: 'done' }, and a job that throws leaves its tick open.

import { AsyncLocalStorage } from 'node:async_hooks';
import { hostname } from 'node:os';

/** @typedef {import('./schedlock-api.js').components['schemas']} Schemas */
/** @typedef {Schemas['AcquireRequest']} AcquireRequest */
/** @typedef {Schemas['AcquireResponse']} AcquireResponse */
/** @typedef {Schemas['ExtendRequest']} ExtendRequest */
/** @typedef {Schemas['ExtendResponse']} ExtendResponse */
/** @typedef {Schemas['ReleaseRequest']} ReleaseRequest */
/** @typedef {Schemas['LockResponse']} LockResponse */
/** @typedef {Schemas['LockView']} LockView */
/** @typedef {Schemas['LockList']} LockList */
/** @typedef {Extract<Schemas['LockHeldError']['error'], { code: 'lock_held' }>} LockHeldDetail */
/** @typedef {{ code: string, message: string }} ErrorDetail */
/** @typedef {AcquireRequest['lock_at_most_for']} Duration  ShedLock's short form ('14m'), ISO-8601, or ms */
/** @typedef {Extract<Schemas['LockHeldError']['error'], { code: 'slot_done' }>} SlotDoneDetail */
/**
 * lockAtMostFor and lockAtLeastFor as ShedLock's; oncePer (a cron schedule, read in oncePerTimezone) or slot (a tick
 * key of your own) to run at most once per tick.
 * @typedef {{ lockAtMostFor: Duration, lockAtLeastFor?: Duration, oncePer?: string, oncePerTimezone?: string,
 *   slot?: string }} LockOptions
 */
/**
 * What withLock did: ran fn (with its value), or skipped it because the lock was held, the tick was done, or the
 * service unavailable.
 * @template T
 * @typedef {{ executed: true, result: T } | { executed: false, reason: 'held' | 'done' | 'unavailable' }} TaskResult
 */

/** The service could not be asked or did not answer: the lock's state is unknown. */
export class ServiceUnavailableError extends Error {
  /** @param {string} message @param {unknown} [cause] */
  constructor(message, cause) {
    super(message, { cause });
    this.name = 'ServiceUnavailableError';
  }
}

/** The service refused the request: 422 invalid_request, 401 unauthorized, 403 forbidden, ... */
export class RequestRejectedError extends Error {
  /** @param {number} status @param {ErrorDetail} detail */
  constructor(status, detail) {
    super(`${status} ${detail.code}: ${detail.message}`);
    this.name = 'RequestRejectedError';
    this.status = status;
    this.code = detail.code;
    this.detail = detail;
  }
}

/** The lease expired (and may have been taken over): extending it was refused, or assertLocked() found it so. */
export class LeaseLostError extends Error {
  /** @param {string} message */
  constructor(message) {
    super(message);
    this.name = 'LeaseLostError';
  }
}

/** @type {AsyncLocalStorage<Lease>} the lease of the job withLock is running, seen by assertLocked() */
const running = new AsyncLocalStorage();

/** A lock this process holds. */
export class Lease {
  #client;
  #token;
  #deadline; // lock_until on this process's monotonic clock: immune to clock skew

  /** @param {SchedLock} client @param {string} name @param {AcquireResponse} acquired @param {number} sentAt */
  constructor(client, name, acquired, sentAt) {
    this.#client = client;
    this.#token = acquired.token;
    this.name = name;
    /** Strictly increases with every acquisition of this name: hand it to what the job writes. */
    this.fencingToken = acquired.fencing_token;
    this.lockedBy = acquired.locked_by;
    this.lockUntil = acquired.lock_until;
    /** The tick this lease runs (oncePer or slot), or null. */
    this.slot = acquired.slot ?? null;
    this.#deadline = sentAt + Date.parse(acquired.lock_until) - Date.parse(acquired.db_time);
  }

  /** True until lock_until, by this process's monotonic clock, unless released or lost. */
  get live() {
    return performance.now() < this.#deadline;
  }

  /** Moves lock_until to the database's now + lockAtMostFor. LeaseLostError when the lease has expired. */
  async extend(/** @type {Duration} */ lockAtMostFor) {
    const sentAt = performance.now();
    /** @type {ExtendRequest} */
    const request = { token: this.#token, lock_at_most_for: lockAtMostFor };
    try {
      const extended = /** @type {ExtendResponse} */ (await this.#client.call('POST', `${path(this.name)}/extend`, request));
      this.lockUntil = extended.lock_until;
      this.#deadline = sentAt + Date.parse(extended.lock_until) - Date.parse(extended.db_time);
    } catch (error) {
      if (error instanceof RequestRejectedError && ['not_holder', 'lock_not_found'].includes(error.code)) {
        this.#deadline = sentAt;
        throw new LeaseLostError(`${this.name}: ${error.message}`);
      }
      throw error;
    }
  }

  /**
   * Gives the lock back; the service keeps it until locked_at + lockAtLeastFor. Idempotent, so it retries.
   * completed: false (the job failed) leaves the lease's slot open for another run.
   */
  async release({ completed = true } = {}) {
    /** @type {ReleaseRequest} */
    const request = { token: this.#token, completed };
    this.#deadline = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.#client.call('POST', `${path(this.name)}/release`, request);
        return;
      } catch (error) {
        if (error instanceof RequestRejectedError && error.code === 'not_holder') return; // taken over: nothing to do
        if (!(error instanceof ServiceUnavailableError) || attempt === 3) throw error;
        await new Promise((resolve) => setTimeout(resolve, 200 * attempt));
      }
    }
  }
}

/** A client for one schedlock service. */
export class SchedLock {
  #url;
  #token;
  #timeoutMs;
  #holder;

  /** @param {{ url?: string, token?: string, timeoutMs?: number, holder?: string }} [options] */
  constructor({
    url = process.env.SCHEDLOCK_URL || 'http://127.0.0.1:8000',
    token = process.env.SCHEDLOCK_TOKEN,
    timeoutMs = 10_000,
    holder = `node on ${hostname()} pid ${process.pid}`,
  } = {}) {
    this.#url = url.replace(/\/+$/, '');
    this.#token = token;
    this.#timeoutMs = timeoutMs;
    this.#holder = holder;
  }

  /**
   * Takes the lock, or resolves to null at once when another holder has it (or, with oncePer or slot, when the
   * tick is done).
   * @param {string} name @param {LockOptions} options @returns {Promise<Lease | null>}
   */
  async tryLock(name, options) {
    const attempt = await this.#attempt(name, options);
    return attempt instanceof Lease ? attempt : null;
  }

  /** @param {string} name @param {LockOptions} options @returns {Promise<Lease | 'held' | 'done'>} */
  async #attempt(name, { lockAtMostFor, lockAtLeastFor = 0, oncePer, oncePerTimezone, slot }) {
    /** @type {AcquireRequest} */
    const request = { lock_at_most_for: lockAtMostFor, lock_at_least_for: lockAtLeastFor, holder: this.#holder };
    if (oncePer !== undefined) request.schedule = oncePer;
    if (oncePerTimezone !== undefined) request.timezone = oncePerTimezone;
    if (slot !== undefined) request.slot = slot;
    const sentAt = performance.now();
    try {
      const acquired = /** @type {AcquireResponse} */ (await this.call('POST', `${path(name)}/acquire`, request));
      return new Lease(this, name, acquired, sentAt);
    } catch (error) {
      if (!(error instanceof RequestRejectedError && ['lock_held', 'slot_done'].includes(error.code))) throw error;
      if (error.code === 'slot_done') {
        const done = /** @type {SlotDoneDetail} */ (error.detail);
        console.info(`schedlock: ${name}'s tick ${done.slot} was completed at ${done.completed_at}: skipped`);
        return 'done';
      }
      const held = /** @type {LockHeldDetail} */ (error.detail);
      console.info(`schedlock: ${name} is held by ${held.locked_by} until ${held.lock_until}: skipped`);
      return 'held';
    }
  }

  /**
   * Runs fn under the lock and releases it afterwards (also when fn throws, leaving its tick open; the lock stays
   * until locked_at + lockAtLeastFor). Skips fn when the lock is held, the tick done or the service unavailable.
   * @template T
   * @param {string} name @param {LockOptions} options @param {(lease: Lease) => T | Promise<T>} fn
   * @returns {Promise<TaskResult<T>>}
   */
  async withLock(name, options, fn) {
    let lease;
    try {
      lease = await this.#attempt(name, options);
    } catch (error) {
      if (!(error instanceof ServiceUnavailableError)) throw error;
      console.error(`schedlock: lock service unavailable, ${name} not run: ${error.message}`);
      return { executed: false, reason: 'unavailable' };
    }
    if (!(lease instanceof Lease)) return { executed: false, reason: lease };
    const held = lease;
    let completed = false;
    try {
      const result = await running.run(held, () => fn(held));
      completed = true;
      return { executed: true, result };
    } finally {
      await held.release({ completed }).catch((/** @type {Error} */ error) => {
        console.warn(`schedlock: could not release ${name}; it frees itself at ${held.lockUntil}: ${error.message}`);
      });
    }
  }

  /** The lock's row, or null when there is no such lock. @param {string} name @returns {Promise<LockResponse | null>} */
  async get(name) {
    try {
      return /** @type {LockResponse} */ (await this.call('GET', path(name)));
    } catch (error) {
      if (error instanceof RequestRejectedError && error.code === 'lock_not_found') return null;
      throw error;
    }
  }

  /** Every lock whose name starts with prefix, in name order. @param {string} prefix @returns {Promise<LockView[]>} */
  async list(prefix) {
    /** @type {LockView[]} */
    const locks = [];
    const query = new URLSearchParams({ prefix });
    for (;;) {
      const page = /** @type {LockList} */ (await this.call('GET', `/v1/locks?${query}`));
      locks.push(...page.items);
      if (page.next_cursor == null) return locks;
      query.set('cursor', page.next_cursor);
    }
  }

  /**
   * One request; the 200 answer's JSON. Throws RequestRejectedError (lock_held too), or ServiceUnavailableError
   * (unreachable, timed out, a 5xx, or an answer that is not the service's JSON).
   * @param {'GET' | 'POST'} method @param {string} target @param {object} [body] @returns {Promise<unknown>}
   */
  async call(method, target, body) {
    /** @type {Record<string, string>} */
    const headers = { accept: 'application/json' };
    if (body !== undefined) headers['content-type'] = 'application/json';
    if (this.#token) headers.authorization = `Bearer ${this.#token}`;
    let response, json;
    try {
      response = await fetch(this.#url + target, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
      json = await response.json();
    } catch (error) {
      throw new ServiceUnavailableError(`lock service unreachable at ${this.#url}: ${describe(error)}`, error);
    }
    if (response.status === 200) return json;
    const detail = json?.error;
    if (response.status >= 500 || typeof detail?.code !== 'string') {
      throw new ServiceUnavailableError(`lock service answered ${response.status}`);
    }
    throw new RequestRejectedError(response.status, detail);
  }
}

/**
 * Runs fn under the lock with a client from SCHEDLOCK_URL and SCHEDLOCK_TOKEN. See SchedLock.withLock.
 * @template T
 * @param {string} name @param {LockOptions} options @param {(lease: Lease) => T | Promise<T>} fn
 * @returns {Promise<TaskResult<T>>}
 */
export function withLock(name, options, fn) {
  return new SchedLock().withLock(name, options, fn);
}

/**
 * ShedLock's LockAssert.assertLocked(): the lease of the job withLock is running here, or LeaseLostError when
 * there is none or it has expired.
 * @returns {Lease}
 */
export function assertLocked() {
  const lease = running.getStore();
  if (lease === undefined) throw new LeaseLostError('The task is not locked.');
  if (!lease.live) throw new LeaseLostError(`The lock ${lease.name} has expired or was released.`);
  return lease;
}

/** @param {string} name */
function path(name) {
  return `/v1/locks/${encodeURIComponent(name)}`;
}

/** @param {unknown} error */
function describe(error) {
  if (!(error instanceof Error)) return String(error);
  return error.cause instanceof Error ? `${error.message} (${error.cause.message})` : error.message;
}
