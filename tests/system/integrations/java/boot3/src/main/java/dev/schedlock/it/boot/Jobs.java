package dev.schedlock.it.boot;

import dev.schedlock.shedlock.SchedlockLease;
import dev.schedlock.shedlock.SchedlockLocks;
import net.javacrumbs.shedlock.core.LockAssert;
import net.javacrumbs.shedlock.spring.annotation.SchedulerLock;
import org.springframework.beans.factory.annotation.Value;
import org.springframework.boot.context.event.ApplicationReadyEvent;
import org.springframework.context.event.EventListener;
import org.springframework.scheduling.annotation.Scheduled;
import org.springframework.stereotype.Component;

/** The jobs, and one JSON line on stdout for each thing the test checks. */
@Component
public class Jobs {
    private final Shared shared;
    private final String provider;
    private final int index;

    public Jobs(Shared shared, @Value("${demo.provider}") String provider, @Value("${demo.index}") int index) {
        this.shared = shared;
        this.provider = provider;
        this.index = index;
    }

    @Scheduled(cron = "*/2 * * * * *")
    @SchedulerLock(name = "${demo.prefix}direct", lockAtMostFor = "PT10S", lockAtLeastFor = "PT1.8S")
    public void direct() {
        LockAssert.assertLocked();
        long fencingToken = SchedlockLocks.currentLease().map(SchedlockLease::fencingToken).orElse(-1L);
        Report.line("run", index, provider, "direct", System.currentTimeMillis() / 2000, fencingToken);
    }

    /**
     * The shared job's trigger: every JVM fires on the same tick, then waits 0, 400 or 800 ms, in an order that
     * rotates with the tick, before it asks for the lock. So each tick has one JVM that comes first, the others
     * find the lock held (lockAtLeastFor 1.5 s), and over three ticks every JVM comes first once.
     */
    @Scheduled(cron = "*/2 * * * * *")
    public void tick() throws InterruptedException {
        long tick = System.currentTimeMillis() / 2000;
        Report.line("tick", index, provider, "shared", tick, -1);
        Thread.sleep(((tick + index) % 3) * 400);
        shared.run(tick);
    }

    @EventListener(ApplicationReadyEvent.class)
    public void ready() {
        Report.line("ready", index, provider, "", System.currentTimeMillis() / 2000, -1);
    }
}
