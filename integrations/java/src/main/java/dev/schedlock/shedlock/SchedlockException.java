package dev.schedlock.shedlock;

import net.javacrumbs.shedlock.support.LockException;

/**
 * schedlock could not be asked, or refused the request: never "held". ShedLock's executor lets it through to the
 * caller (Spring's scheduler logs it), so the run does not happen and says why, where a silent skip would hide an
 * outage or a bug.
 */
public class SchedlockException extends LockException {
    private static final long serialVersionUID = 1L;

    private final int status;
    private final String code;

    SchedlockException(String message, int status, String code, Throwable cause) {
        super(message, cause);
        this.status = status;
        this.code = code;
    }

    /** The HTTP status of schedlock's answer, or 0 when there was none (connection refused, timeout). */
    public int status() {
        return status;
    }

    /** The error code of schedlock's answer (e.g. {@code storage_unavailable}), or null without one. */
    public String code() {
        return code;
    }
}
