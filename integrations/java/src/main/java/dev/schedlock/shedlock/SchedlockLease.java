package dev.schedlock.shedlock;

import java.time.Instant;
import java.util.Optional;

/**
 * One acquisition of a lock, as schedlock answered it: what a task running under it can read through
 * {@link SchedlockLocks#currentLease()}. Extending (KeepAliveLockProvider, LockExtender) moves {@link #lockUntil()};
 * the lease and its fencing token stay the same.
 */
public final class SchedlockLease {
    private final String name;
    private final String token;
    private final long fencingToken;
    private final Instant lockedAt;
    private final String lockedBy;
    private final String slot;
    private volatile Instant lockUntil;
    /** lockUntil by this JVM's System.nanoTime(), counted from the start of the request: never later than it. */
    private volatile long deadline;
    private volatile boolean failed;
    private volatile boolean released;

    SchedlockLease(String name, String token, long fencingToken, Instant lockedAt, Instant lockUntil,
                   String lockedBy, String slot, long deadline) {
        this.name = name;
        this.token = token;
        this.fencingToken = fencingToken;
        this.lockedAt = lockedAt;
        this.lockUntil = lockUntil;
        this.lockedBy = lockedBy;
        this.slot = slot;
        this.deadline = deadline;
    }

    /** The lock's name. */
    public String name() {
        return name;
    }

    /**
     * Strictly increases with every acquisition of the name, Java ShedLock nodes' included: hand it to what the task
     * writes, so that a holder whose lease ran out while it was paused can be refused there.
     */
    public long fencingToken() {
        return fencingToken;
    }

    /** When the lock was taken, by the database's clock. */
    public Instant lockedAt() {
        return lockedAt;
    }

    /** Until when the lease holds, by the database's clock, as of its last acquire or extend. */
    public Instant lockUntil() {
        return lockUntil;
    }

    /** The {@code locked_by} of the row: the holder and a lease id unique to this acquisition. */
    public String lockedBy() {
        return lockedBy;
    }

    /** The schedule tick or slot key this run is for, when the provider was configured with one for the name. */
    public Optional<String> slot() {
        return Optional.ofNullable(slot);
    }

    /**
     * Says the run failed: for a slot run, the release then leaves the tick open ({@code completed: false}), so
     * another node's trigger for it runs it again. ShedLock unlocks without telling the provider whether the task
     * threw, so a task that wants this calls it before it ends (e.g. in a catch block). No effect without a slot.
     */
    public void markFailed() {
        failed = true;
    }

    /** Whether {@link #markFailed()} was called. */
    public boolean failed() {
        return failed;
    }

    /** Whether the lease has ended: released when its task finished, or lost when an extension was refused. */
    public boolean released() {
        return released;
    }

    String token() {
        return token;
    }

    long deadline() {
        return deadline;
    }

    void extended(Instant until, long deadline) {
        lockUntil = until;
        this.deadline = deadline;
    }

    void markReleased() {
        released = true;
    }

    @Override
    public String toString() {
        return "SchedlockLease{name=" + name + ", fencingToken=" + fencingToken + ", lockedBy=" + lockedBy
                + ", lockUntil=" + lockUntil + (slot == null ? "" : ", slot=" + slot) + "}";
    }
}
