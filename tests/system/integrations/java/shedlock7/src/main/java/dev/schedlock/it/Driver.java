package dev.schedlock.it;

import dev.schedlock.shedlock.SchedlockException;
import dev.schedlock.shedlock.SchedlockLease;
import dev.schedlock.shedlock.SchedlockLockProvider;
import dev.schedlock.shedlock.SchedlockLocks;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import net.javacrumbs.shedlock.core.DefaultLockingTaskExecutor;
import net.javacrumbs.shedlock.core.LockAssert;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.LockExtender;
import net.javacrumbs.shedlock.core.LockProvider;
import net.javacrumbs.shedlock.core.LockingTaskExecutor;
import net.javacrumbs.shedlock.core.SimpleLock;
import net.javacrumbs.shedlock.provider.jdbctemplate.JdbcTemplateLockProvider;
import net.javacrumbs.shedlock.support.ShortKeepAlive;
import org.postgresql.ds.PGSimpleDataSource;
import org.springframework.jdbc.core.JdbcTemplate;

/**
 * Runs scenarios the tests name, one command a line on stdin, one JSON object a line on stdout (logs go to stderr):
 * the schedlock provider under ShedLock 7's own DefaultLockingTaskExecutor and KeepAliveLockProvider, and ShedLock
 * 7's JdbcTemplateLockProvider (usingDbTime) on schedlock's table. tests/system/integrations/ drives it.
 */
public final class Driver {
    private static final Map<String, SimpleLock> JDBC_LOCKS = new HashMap<>();
    private static LockProvider jdbc;

    private static final Map<String, SchedlockLockProvider> KEPT = new HashMap<>();

    private Driver() {
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] a = line.trim().split("\\s+");
            Map<String, Object> out;
            try {
                out = command(a);
            } catch (Throwable t) {
                out = new LinkedHashMap<>();
                out.put("error", t.toString());
            }
            System.out.println(json(out));
            System.out.flush();
        }
    }

    private static Map<String, Object> command(String[] a) throws Throwable {
        return switch (a[0]) {
            case "run" -> run(provider(a[1]), a[2], ms(a[3]), ms(a[4]), a.length > 5 && a[5].equals("throw"));
            // the same provider each time: SCHEDLOCK_TOKEN_FILE read again when it rotates (docs/auth.md)
            case "run-kept" -> run(KEPT.computeIfAbsent(a[1], Driver::provider), a[2], ms(a[3]), ms(a[4]), false);
            case "contend" -> contend(a[1], a[2]);
            case "extend" -> extend(a[1], a[2]);
            case "extend-expired" -> extendExpired(a[1], a[2]);
            case "keepalive" -> keepAlive(a[1], a[2]);
            case "keepalive-quota" -> keepAliveQuota(a[1], a[2], a[3], a[4]);
            case "quota" -> quota(a[1], a[2], a[3]);
            case "failure" -> failure(SchedlockLockProvider.builder().url(a[1]), a[2]);
            case "token-failure" -> failure(SchedlockLockProvider.builder().url(a[1]).token(a[2]), a[3]);
            case "slot" -> run(SchedlockLockProvider.builder().url(a[1]).slot(a[2], () -> a[3]).build(), a[2],
                    Duration.ofMinutes(1), Duration.ZERO, a.length > 4 && a[4].equals("fail"));
            case "once-per" -> run(SchedlockLockProvider.builder().url(a[1]).oncePer(a[2], "* * * * *", "UTC")
                    .build(), a[2], Duration.ofMinutes(1), Duration.ZERO, false);
            case "outside" -> outside();
            case "jdbc-open" -> jdbcOpen(a[1], a[2], a[3]);
            case "jlock" -> jlock(a[1], ms(a[2]), ms(a[3]));
            case "junlock" -> {
                JDBC_LOCKS.remove(a[1]).unlock();
                yield Map.of("ok", true);
            }
            case "jextend" -> {
                Optional<SimpleLock> extended = JDBC_LOCKS.remove(a[1]).extend(ms(a[2]), ms(a[3]));
                extended.ifPresent(lock -> JDBC_LOCKS.put(a[1], lock));
                yield Map.of("extended", extended.isPresent());
            }
            default -> throw new IllegalArgumentException("unknown command " + a[0]);
        };
    }

    private static SchedlockLockProvider provider(String url) {
        return SchedlockLockProvider.builder().url(url).build(); // SCHEDLOCK_TOKEN from the environment
    }

    private static Duration ms(String millis) {
        return Duration.ofMillis(Long.parseLong(millis));
    }

    private static LockConfiguration config(String name, Duration atMost, Duration atLeast) {
        return new LockConfiguration(Instant.now(), name, atMost, atLeast);
    }

    /** One run through DefaultLockingTaskExecutor; the task reports what it saw of its lock. */
    private static Map<String, Object> run(LockProvider provider, String name, Duration atMost, Duration atLeast,
                                           boolean fail) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("executed", false);
        LockingTaskExecutor executor = new DefaultLockingTaskExecutor(provider);
        try {
            executor.executeWithLock((Runnable) () -> {
                out.put("executed", true);
                LockAssert.assertLocked(); // throws outside a lock
                out.put("assert_locked", true);
                SchedlockLease lease = SchedlockLocks.currentLease().orElseThrow();
                out.put("fencing_token", SchedlockLocks.currentFencingToken());
                out.put("locked_by", lease.lockedBy());
                out.put("slot", lease.slot().orElse(null));
                if (fail) {
                    SchedlockLocks.markFailed();
                    throw new IllegalStateException("the task failed");
                }
            }, config(name, atMost, atLeast));
        } catch (IllegalStateException e) {
            out.put("thrown", e.getMessage());
        }
        out.put("lease_after", SchedlockLocks.currentLease().isPresent());
        return out;
    }

    /** A second node (another provider, another holder) tries the same lock while the first runs its task. */
    private static Map<String, Object> contend(String url, String name) {
        Map<String, Object> out = new LinkedHashMap<>();
        LockConfiguration config = config(name, Duration.ofSeconds(30), Duration.ZERO);
        new DefaultLockingTaskExecutor(provider(url)).executeWithLock((Runnable) () -> {
            out.put("first_executed", true);
            SchedlockLockProvider second = SchedlockLockProvider.builder().url(url).holder("second node").build();
            boolean[] ran = {false};
            CompletableFuture.runAsync(() -> new DefaultLockingTaskExecutor(second)
                    .executeWithLock((Runnable) () -> ran[0] = true, config)).join();
            out.put("second_executed", ran[0]);
        }, config);
        return out;
    }

    private static Map<String, Object> extend(String url, String name) {
        Map<String, Object> out = new LinkedHashMap<>();
        SchedlockLockProvider provider = provider(url);
        SimpleLock lock = provider.lock(config(name, Duration.ofSeconds(2), Duration.ZERO)).orElseThrow();
        SchedlockLease lease = SchedlockLocks.currentLease().orElseThrow();
        out.put("before", lease.lockUntil().toString());
        Optional<SimpleLock> extended = lock.extend(Duration.ofSeconds(60), Duration.ZERO);
        out.put("extended", extended.isPresent());
        out.put("after", lease.lockUntil().toString());
        out.put("same_lease", SchedlockLocks.currentLease().orElseThrow() == lease);
        try {
            lock.extend(Duration.ofSeconds(60), Duration.ZERO);
            out.put("old_lock_usable", true);
        } catch (IllegalStateException e) {
            out.put("old_lock_usable", false);
        }
        extended.orElseThrow().unlock();
        out.put("lease_after_unlock", SchedlockLocks.currentLease().isPresent());
        // The executor's way: LockExtender extends the lock of the running task.
        new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) () -> {
            out.put("task_before", SchedlockLocks.currentLease().orElseThrow().lockUntil().toString());
            LockExtender.extendActiveLock(Duration.ofSeconds(90), Duration.ZERO);
            out.put("task_after", SchedlockLocks.currentLease().orElseThrow().lockUntil().toString());
        }, config(name, Duration.ofSeconds(2), Duration.ZERO));
        return out;
    }

    private static Map<String, Object> extendExpired(String url, String name) throws InterruptedException {
        SimpleLock lock = provider(url).lock(config(name, Duration.ofMillis(300), Duration.ZERO)).orElseThrow();
        Thread.sleep(800);
        Optional<SimpleLock> extended = lock.extend(Duration.ofSeconds(60), Duration.ZERO);
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("extended", extended.isPresent());
        out.put("lease_after", SchedlockLocks.currentLease().isPresent());
        return out;
    }

    /** KeepAliveLockProvider extends a 2 s lock while the task runs 3.5 s; a rival node is refused throughout. */
    private static Map<String, Object> keepAlive(String url, String name) throws InterruptedException {
        Map<String, Object> out = new LinkedHashMap<>();
        ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
        try {
            LockProvider provider = ShortKeepAlive.wrap(provider(url), scheduler, Duration.ofSeconds(1));
            SchedlockLockProvider rival = SchedlockLockProvider.builder().url(url).holder("rival").build();
            LockConfiguration config = config(name, Duration.ofSeconds(2), Duration.ZERO);
            new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) () -> {
                SchedlockLease lease = SchedlockLocks.currentLease().orElseThrow();
                out.put("start_until", lease.lockUntil().toString());
                boolean rivalAcquired = false;
                try {
                    for (int i = 0; i < 7; i++) {
                        Thread.sleep(500);
                        rivalAcquired |= rival.lock(config).isPresent();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                LockAssert.assertLocked();
                out.put("end_until", lease.lockUntil().toString());
                out.put("fencing_token", SchedlockLocks.currentFencingToken());
                out.put("rival_acquired", rivalAcquired);
            }, config);
        } finally {
            scheduler.shutdownNow();
        }
        return out;
    }

    /**
     * KeepAliveLockProvider extends a 6 s lock every 3 s for a caller whose quota (one request per 4 s) answers
     * 429 to its extensions; the task runs 9 s while a rival (another token, its own quota) tries the lock. The
     * release may meet a 429 its lease has no time left to wait out: reported, not thrown.
     */
    private static Map<String, Object> keepAliveQuota(String url, String token, String rivalToken, String name)
            throws InterruptedException {
        Map<String, Object> out = new LinkedHashMap<>();
        ScheduledExecutorService scheduler = Executors.newSingleThreadScheduledExecutor();
        try {
            LockProvider provider = ShortKeepAlive.wrap(SchedlockLockProvider.builder().url(url).token(token).build(),
                    scheduler, Duration.ofSeconds(1));
            SchedlockLockProvider rival = SchedlockLockProvider.builder().url(url).token(rivalToken)
                    .holder("rival").build();
            LockConfiguration config = config(name, Duration.ofSeconds(6), Duration.ZERO);
            new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) () -> {
                SchedlockLease lease = SchedlockLocks.currentLease().orElseThrow();
                out.put("start_until", lease.lockUntil().toString());
                boolean rivalAcquired = false;
                try {
                    for (int i = 0; i < 18; i++) {
                        Thread.sleep(500);
                        rivalAcquired |= rival.lock(config).isPresent();
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                out.put("lost", lease.released());
                out.put("end_until", lease.lockUntil().toString());
                out.put("fencing_token", lease.fencingToken());
                out.put("rival_acquired", rivalAcquired);
            }, config);
        } catch (SchedlockException e) {
            out.put("release_threw", e.getMessage());
        } finally {
            scheduler.shutdownNow();
        }
        return out;
    }

    /**
     * A caller whose quota (burst 2, one request per 4 s) is spent by an acquire and a held answer: its next acquire
     * (429) is a skip, not an exception, and its release (429) waits out the Retry-After within the 10 s lease.
     */
    private static Map<String, Object> quota(String url, String token, String name) {
        Map<String, Object> out = new LinkedHashMap<>();
        SchedlockLockProvider provider = SchedlockLockProvider.builder().url(url).token(token).build();
        LockConfiguration config = config(name, Duration.ofSeconds(10), Duration.ZERO);
        SimpleLock lock = provider.lock(config).orElseThrow();
        out.put("held_skipped", provider.lock(config).isEmpty()); // 409 lock_held: the quota's second request
        boolean[] ran = {false};
        try {
            new DefaultLockingTaskExecutor(provider).executeWithLock((Runnable) () -> ran[0] = true,
                    config(name + "-2", Duration.ofSeconds(10), Duration.ZERO));
            out.put("threw", null);
        } catch (SchedlockException e) {
            out.put("threw", e.getMessage());
        }
        out.put("over_quota_ran", ran[0]);
        long start = System.nanoTime();
        lock.unlock();
        out.put("release_ms", (System.nanoTime() - start) / 1_000_000);
        out.put("lease_after", SchedlockLocks.currentLease().isPresent());
        return out;
    }

    /** A run whose lock cannot be had for a reason other than "held": the executor must throw, the task not run. */
    private static Map<String, Object> failure(SchedlockLockProvider.Builder builder, String name) {
        Map<String, Object> out = new LinkedHashMap<>();
        boolean[] ran = {false};
        try {
            new DefaultLockingTaskExecutor(builder
                    .connectTimeout(Duration.ofSeconds(2)).requestTimeout(Duration.ofSeconds(5)).build())
                    .executeWithLock((Runnable) () -> ran[0] = true, config(name, Duration.ofMinutes(1), Duration.ZERO));
            out.put("threw", null);
        } catch (SchedlockException e) {
            out.put("threw", e.getClass().getSimpleName());
            out.put("lock_exception", e instanceof net.javacrumbs.shedlock.support.LockException);
            out.put("status", e.status());
            out.put("code", e.code());
            out.put("message", e.getMessage());
        }
        out.put("task_ran", ran[0]);
        return out;
    }

    private static Map<String, Object> outside() {
        Map<String, Object> out = new LinkedHashMap<>();
        try {
            SchedlockLocks.currentFencingToken();
            out.put("fencing_threw", false);
        } catch (IllegalStateException e) {
            out.put("fencing_threw", true);
        }
        try {
            LockAssert.assertLocked();
            out.put("assert_threw", false);
        } catch (IllegalStateException e) {
            out.put("assert_threw", true);
        }
        return out;
    }

    private static Map<String, Object> jdbcOpen(String jdbcUrl, String table, String lockedBy) {
        PGSimpleDataSource dataSource = new PGSimpleDataSource();
        dataSource.setURL(jdbcUrl);
        jdbc = new JdbcTemplateLockProvider(JdbcTemplateLockProvider.Configuration.builder()
                .withJdbcTemplate(new JdbcTemplate(dataSource))
                .withTableName(table)
                .withLockedByValue(lockedBy)
                .usingDbTime()
                .build());
        return Map.of("ok", true);
    }

    private static Map<String, Object> jlock(String name, Duration atMost, Duration atLeast) {
        Optional<SimpleLock> lock = jdbc.lock(config(name, atMost, atLeast));
        lock.ifPresent(l -> JDBC_LOCKS.put(name, l));
        return Map.of("acquired", lock.isPresent());
    }

    private static String json(Map<String, Object> fields) {
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<String, Object> field : fields.entrySet()) {
            if (out.length() > 1) {
                out.append(',');
            }
            out.append(quote(field.getKey())).append(':');
            Object v = field.getValue();
            out.append(v == null ? "null" : v instanceof Number || v instanceof Boolean ? v.toString() : quote(v.toString()));
        }
        return out.append('}').toString();
    }

    private static String quote(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') {
                out.append('\\').append(c);
            } else if (c < 0x20) {
                out.append(String.format("\\u%04x", (int) c));
            } else {
                out.append(c);
            }
        }
        return out.append('"').toString();
    }
}
