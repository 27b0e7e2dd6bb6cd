package dev.schedlock.shedlock;

import java.time.Instant;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import net.javacrumbs.shedlock.core.AbstractSimpleLock;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A held schedlock lease as ShedLock's SimpleLock. AbstractSimpleLock makes a lock unusable once unlocked or
 * extended; an extension returns a new SchedlockLock on the same lease (the lease token does not change).
 */
final class SchedlockLock extends AbstractSimpleLock {
    private static final Logger log = LoggerFactory.getLogger(SchedlockLock.class);
    /**
     * Release and extend are safe to repeat: three tries ride out a dropped connection or a brief 503, and a 429
     * (over the caller's quota) is tried again after its Retry-After while the lease lives.
     */
    private static final int ATTEMPTS = 3;

    private final Api api;
    private final SchedlockLease lease;

    SchedlockLock(LockConfiguration configuration, Api api, SchedlockLease lease) {
        super(configuration);
        this.api = api;
        this.lease = lease;
    }

    SchedlockLease lease() {
        return lease;
    }

    @Override
    protected void doUnlock() {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("token", lease.token());
        if (lease.slot().isPresent()) {
            body.put("completed", !lease.failed());
        }
        try {
            Api.Answer answer = api.postRetrying("release", lease.name(), body, ATTEMPTS, lease.deadline());
            if (answer.status() == 200) {
                return;
            }
            if (answer.status() == 409 || answer.status() == 404) {
                // The lease ran out and someone else took the lock: there is nothing of ours left to release, but
                // the task overlapped the next holder's run, which is worth a warning.
                log.warn("schedlock: the lease on '{}' (fencing token {}) was lost before its release: {}",
                        lease.name(), lease.fencingToken(), answer.code());
                return;
            }
            throw answer.failure("release", lease.name());
        } catch (SchedlockException e) {
            log.error("schedlock: could not release '{}'; it stays locked until {} (lockAtMostFor)",
                    lease.name(), lease.lockUntil(), e);
            throw e;
        } finally {
            lease.markReleased();
            SchedlockLocks.remove(lease);
        }
    }

    @Override
    protected Optional<SimpleLock> doExtend(LockConfiguration configuration) {
        Map<String, Object> body = new LinkedHashMap<>();
        body.put("token", lease.token());
        body.put("lock_at_most_for", configuration.getLockAtMostFor().toMillis());
        body.put("lock_at_least_for", configuration.getLockAtLeastFor().toMillis());
        Api.Answer answer;
        try {
            answer = api.postRetrying("extend", lease.name(), body, ATTEMPTS, lease.deadline());
        } catch (SchedlockException e) {
            // KeepAliveLockProvider runs this on its own scheduler, which would drop the exception unseen.
            log.error("schedlock: could not extend '{}'", lease.name(), e);
            throw e;
        }
        if (answer.status() == 200) {
            lease.extended(Instant.parse((String) answer.body().get("lock_until")),
                    answer.sent() + configuration.getLockAtMostFor().toNanos());
            return Optional.of(new SchedlockLock(configuration, api, lease));
        }
        if (answer.status() == 409 || answer.status() == 404) {
            log.warn("schedlock: extending '{}' was refused ({}): the lease has expired or was taken over",
                    lease.name(), answer.code());
            // Lost: ShedLock will not unlock it (the refused lock is spent), so it is no current lease any more.
            lease.markReleased();
            return Optional.empty();
        }
        if (answer.rateLimited()) {
            // Over the caller's quota until the lease's end: no retry fitted before it, so the lease is lost.
            log.warn("schedlock: could not extend '{}' before its lease ran out: over the caller's quota (429 "
                    + "rate_limited)", lease.name());
            lease.markReleased();
            return Optional.empty();
        }
        SchedlockException failure = answer.failure("extend", lease.name());
        log.error("schedlock: could not extend '{}'", lease.name(), failure);
        throw failure;
    }
}
