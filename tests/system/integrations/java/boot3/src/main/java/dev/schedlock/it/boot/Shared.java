package dev.schedlock.it.boot;

import dev.schedlock.shedlock.SchedlockLease;
import dev.schedlock.shedlock.SchedlockLocks;
import net.javacrumbs.shedlock.core.LockAssert;
import net.javacrumbs.shedlock.spring.annotation.SchedulerLock;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.stereotype.Component;

/** The shared job: @SchedulerLock on a bean's method, called by Jobs.tick() (ShedLock's proxy takes the lock). */
@Component
public class Shared {
    private final String provider;
    private final int index;

    public Shared(@Value("${demo.provider}") String provider, @Value("${demo.index}") int index) {
        this.provider = provider;
        this.index = index;
    }

    @SchedulerLock(name = "${demo.prefix}shared", lockAtMostFor = "PT10S", lockAtLeastFor = "PT1.5S")
    public void run(long tick) {
        LockAssert.assertLocked();
        long fencingToken = SchedlockLocks.currentLease().map(SchedlockLease::fencingToken).orElse(-1L);
        Report.line("run", index, provider, "shared", tick, fencingToken);
    }
}
