package dev.schedlock.shedlock;

import java.util.ArrayDeque;
import java.util.Deque;
import java.util.Optional;

/**
 * The lease of the task running on this thread, set by {@link SchedlockLockProvider} while ShedLock runs a task
 * under one of its locks (ShedLock runs the task on the thread that took the lock, and unlocks it afterwards).
 * Beside ShedLock's own {@code LockAssert.assertLocked()}, this gives the task what only schedlock has: the fencing
 * token and the lease.
 */
public final class SchedlockLocks {
    private static final ThreadLocal<Deque<SchedlockLease>> ACTIVE = new ThreadLocal<>();

    private SchedlockLocks() {
    }

    /** The lease of the innermost task running under a schedlock lock on this thread, if any. */
    public static Optional<SchedlockLease> currentLease() {
        Deque<SchedlockLease> leases = ACTIVE.get();
        if (leases == null) {
            return Optional.empty();
        }
        // A lease unlocked from another thread is left here; it is dropped as soon as it is seen.
        while (!leases.isEmpty() && leases.peek().released()) {
            leases.pop();
        }
        if (leases.isEmpty()) {
            ACTIVE.remove();
            return Optional.empty();
        }
        return Optional.of(leases.peek());
    }

    /**
     * The fencing token of the task running on this thread.
     *
     * @throws IllegalStateException outside a task running under a schedlock lock
     */
    public static long currentFencingToken() {
        return currentLease()
                .orElseThrow(() -> new IllegalStateException("no schedlock lock is held by this thread"))
                .fencingToken();
    }

    /**
     * Marks the current run failed: see {@link SchedlockLease#markFailed()}.
     *
     * @throws IllegalStateException outside a task running under a schedlock lock
     */
    public static void markFailed() {
        currentLease()
                .orElseThrow(() -> new IllegalStateException("no schedlock lock is held by this thread"))
                .markFailed();
    }

    static void push(SchedlockLease lease) {
        Deque<SchedlockLease> leases = ACTIVE.get();
        if (leases == null) {
            leases = new ArrayDeque<>();
            ACTIVE.set(leases);
        }
        leases.removeIf(SchedlockLease::released);
        leases.push(lease);
    }

    static void remove(SchedlockLease lease) {
        Deque<SchedlockLease> leases = ACTIVE.get();
        if (leases == null) {
            return;
        }
        leases.remove(lease);
        if (leases.isEmpty()) {
            ACTIVE.remove(); // no ThreadLocal value left behind on a pooled scheduler thread
        }
    }
}
