package net.javacrumbs.shedlock.support;

import java.time.Duration;
import java.util.concurrent.ScheduledExecutorService;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockProvider;

/**
 * ShedLock's own KeepAliveLockProvider with a shorter minimum lockAtMostFor than its public 30 s, through the
 * package-private constructor ShedLock's tests use: so that a test sees several extensions in seconds, not minutes.
 * Everything else is the real class.
 */
public final class ShortKeepAlive {
    private ShortKeepAlive() {
    }

    public static LockProvider wrap(ExtensibleLockProvider provider, ScheduledExecutorService scheduler,
                                    Duration minimalLockAtMostFor) {
        return new KeepAliveLockProvider(provider, scheduler, minimalLockAtMostFor);
    }
}
