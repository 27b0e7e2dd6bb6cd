/**
 * The task's name and the tick of a node-cron coordination key.
 * @param {string} key @returns {{ task: string, tick: string }}
 */
export function parseKey(key: string): {
    task: string;
    tick: string;
};
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
    constructor(message: string, cause?: unknown);
}
/** The service refused the request (a bad name, a missing or wrong token): a configuration bug, never a skip. */
export class RequestRejectedError extends Error {
    /**
     * @param {number} status @param {{ code: string, message: string, [field: string]: unknown }} detail
     * @param {number} [retryAfter] the Retry-After header, in seconds
     */
    constructor(status: number, detail: {
        code: string;
        message: string;
        [field: string]: unknown;
    }, retryAfter?: number);
    status: number;
    code: string;
    /** the error body's fields: code, message and what the code adds (locked_by, stale, last_completed_slot...) */
    detail: {
        [field: string]: unknown;
        code: string;
        message: string;
    };
    /** @type {number | undefined} the Retry-After header in seconds (a 429 rate_limited, a 503), when sent */
    retryAfter: number | undefined;
}
/**
 * A token kept in a file its platform rotates: read now (a missing file throws at once), and again whenever the
 * file's mtime, size or inode change (a projected volume swaps a symlink). A file unreadable after a good read keeps
 * the last token.
 */
export class TokenFile {
    /** @param {string} path */
    constructor(path: string);
    /** @returns {string} the current token */
    get token(): string;
    #private;
}
/** @implements {RunCoordinator} */
export class SchedlockCoordinator implements RunCoordinator {
    /** @param {CoordinatorOptions} [options] */
    constructor({ url, token, tokenFile, timeoutMs, holder, lockName, failOpen, logger, }?: CoordinatorOptions);
    /**
     * Takes the tick: true to run it, false when another node runs it or ran it. Throws when schedlock cannot be asked
     * (unless failOpen) or refuses the request, and node-cron skips the tick with reason 'coordinator-error'.
     * @param {string} key @param {number} ttlMs @returns {Promise<boolean>}
     */
    shouldRun(key: string, ttlMs: number): Promise<boolean>;
    /**
     * Releases the tick's lock: completed, unless the task wrapped in job() threw. Never throws; a release that cannot
     * be sent is logged, and the lock frees itself at lock_until. Tried three times while schedlock cannot be asked,
     * and after each 429 (over the caller's quota) its Retry-After later, as long as the lease lasts.
     * @param {string} key @returns {Promise<void>}
     */
    onComplete(key: string): Promise<void>;
    /**
     * The task function for cron.schedule: runs fn, and when it throws, marks the tick failed, so that onComplete
     * leaves it open for another node's trigger of the same tick. The error goes on to node-cron.
     * @template T
     * @param {(context: TaskContext) => T | Promise<T>} fn
     * @returns {(context: TaskContext) => Promise<T>}
     */
    job<T>(fn: (context: TaskContext) => T | Promise<T>): (context: TaskContext) => Promise<T>;
    #private;
}
export type RunCoordinator = import("node-cron").RunCoordinator;
export type TaskContext = import("node-cron").TaskContext;
export type Logger = import("node-cron").Logger;
export type CoordinatorOptions = {
    /**
     * the service, default SCHEDLOCK_URL or http://127.0.0.1:8000
     */
    url?: string;
    /**
     * the API token, default SCHEDLOCK_TOKEN
     */
    token?: string;
    /**
     * a file holding the token, read again whenever it changes (a Kubernetes projected
     * service-account token), default SCHEDLOCK_TOKEN_FILE; used when no token is given
     */
    tokenFile?: string;
    /**
     * per request, default 10000
     */
    timeoutMs?: number;
    /**
     * who holds the lock, shown to other nodes, default "node-cron on HOST pid PID"
     */
    holder?: string;
    /**
     * the lock of a task, default the task's name
     */
    lockName?: (taskName: string) => string;
    /**
     * run the tick without a lock when schedlock cannot be asked, default false
     */
    failOpen?: boolean;
    /**
     * default console
     */
    logger?: Pick<Logger, "debug" | "info" | "warn" | "error">;
};
