package dev.schedlock.shedlock;

import java.net.InetAddress;
import java.net.URI;
import java.net.UnknownHostException;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.Properties;
import java.util.function.Supplier;
import net.javacrumbs.shedlock.core.ExtensibleLockProvider;
import net.javacrumbs.shedlock.core.LockConfiguration;
import net.javacrumbs.shedlock.core.SimpleLock;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A ShedLock {@code LockProvider} whose locks are schedlock's: the bean that replaces {@code JdbcTemplateLockProvider}
 * and keeps every {@code @SchedulerLock}. Every time is the database's (durations are sent relative); the lock is
 * skipped (an empty Optional) only when schedlock answers 409 {@code lock_held}, or {@code slot_done} for a name
 * configured to run once per tick, or 429 {@code rate_limited} (the caller over its quota, logged as a warning).
 * Anything else, an unreachable service, a timeout, a 5xx or a refused request, throws a {@link SchedlockException}
 * (ShedLock's {@code LockException}): the run does not happen, and says why. An extension or a release answered 429
 * is retried after its Retry-After while the lease lives.
 *
 * <pre>{@code
 * @Bean
 * LockProvider lockProvider() {
 *     return SchedlockLockProvider.builder().build(); // SCHEDLOCK_URL, SCHEDLOCK_TOKEN
 * }
 * }</pre>
 */
public final class SchedlockLockProvider implements ExtensibleLockProvider {
    private static final Logger log = LoggerFactory.getLogger(SchedlockLockProvider.class);
    /** As in every schedlock client: a local service when nothing says otherwise. */
    public static final String DEFAULT_URL = "http://127.0.0.1:8000";

    private final Api api;
    private final String holder;
    private final Map<String, Tick> ticks;

    private SchedlockLockProvider(Builder builder) {
        this.api = new Api(URI.create(builder.url), builder.tokenSource(), builder.connectTimeout,
                builder.requestTimeout);
        this.holder = builder.holder;
        this.ticks = Map.copyOf(builder.ticks);
    }

    /** A builder whose URL and token default to SCHEDLOCK_URL and SCHEDLOCK_TOKEN. */
    public static Builder builder() {
        return new Builder();
    }

    /** The holder this provider records in {@code locked_by}: by default the host name and the JVM's pid. */
    public String holder() {
        return holder;
    }

    /** The service's base URL. */
    public URI url() {
        return api.base();
    }

    @Override
    public Optional<SimpleLock> lock(LockConfiguration configuration) {
        String name = configuration.getName();
        Map<String, Object> body = new LinkedHashMap<>();
        // Relative durations, in milliseconds: the database's clock sets locked_at and lock_until, not this JVM's.
        body.put("lock_at_most_for", configuration.getLockAtMostFor().toMillis());
        body.put("lock_at_least_for", configuration.getLockAtLeastFor().toMillis());
        body.put("holder", holder);
        Tick tick = ticks.get(name);
        if (tick != null) {
            tick.addTo(body);
        }
        Api.Answer answer = api.post("acquire", name, body);
        if (answer.status() == 200) {
            SchedlockLease lease = lease(name, answer, answer.sent() + configuration.getLockAtMostFor().toNanos());
            SchedlockLocks.push(lease);
            return Optional.of(new SchedlockLock(configuration, api, lease));
        }
        if (answer.status() == 409 && "lock_held".equals(answer.code())) {
            log.debug("schedlock: '{}' is held by {} until {}: not running it", name, answer.error("locked_by"),
                    answer.error("lock_until"));
            return Optional.empty();
        }
        if (answer.status() == 409 && "slot_done".equals(answer.code()) && tick != null) {
            log.debug("schedlock: tick {} of '{}' was completed at {}: not running it", answer.error("slot"), name,
                    answer.error("completed_at"));
            return Optional.empty();
        }
        if (answer.rateLimited()) {
            // Over this caller's quota: no verdict on the lock, and no outage either. This run is skipped, as when
            // the lock is held; a later trigger tries again (a warning: a quota too tight for its jobs is a bug).
            log.warn("schedlock: '{}' not run: this caller is over its quota (429 rate_limited, retry after {} s)",
                    name, answer.retryAfter() == null ? "?" : answer.retryAfter().toSeconds());
            return Optional.empty();
        }
        throw answer.failure("acquire", name);
    }

    private static SchedlockLease lease(String name, Api.Answer answer, long deadline) {
        Map<String, Object> b = answer.body();
        try {
            return new SchedlockLease(name, (String) Objects.requireNonNull(b.get("token")),
                    ((Number) b.get("fencing_token")).longValue(), Instant.parse((String) b.get("locked_at")),
                    Instant.parse((String) b.get("lock_until")), (String) b.get("locked_by"),
                    (String) b.get("slot"), deadline);
        } catch (RuntimeException e) {
            // Not a lease schedlock would send (another service on that URL?): the lock's state is unknown.
            throw new SchedlockException("schedlock acquire of '" + name + "' answered 200 without a lease: "
                    + b, 200, null, e);
        }
    }

    /** How a name configured with {@link Builder#oncePer} or {@link Builder#slot} names its tick. */
    private record Tick(String schedule, String timezone, Supplier<String> slot) {
        void addTo(Map<String, Object> body) {
            if (slot != null) {
                body.put("slot", slot.get());
            } else {
                body.put("schedule", schedule);
                body.put("timezone", timezone);
            }
        }
    }

    /**
     * Configuration: each setting from a setter or {@link #properties} (the later call wins), else the environment,
     * else its default.
     */
    public static final class Builder {
        private String url;
        private String token;
        private Path tokenFile;
        private String holder;
        private Duration connectTimeout = Duration.ofSeconds(5);
        private Duration requestTimeout = Duration.ofSeconds(10);
        private final Map<String, Tick> ticks = new HashMap<>();

        private Builder() {
        }

        /** The service's base URL, e.g. {@code http://schedlock:8000}; default SCHEDLOCK_URL, else 127.0.0.1:8000. */
        public Builder url(String url) {
            this.url = Objects.requireNonNull(url, "url");
            return this;
        }

        /** The API token ({@code Authorization: Bearer}); default SCHEDLOCK_TOKEN, else none. */
        public Builder token(String token) {
            this.token = token;
            return this;
        }

        /**
         * A file holding the API token, read again whenever it changes (a Kubernetes projected service-account
         * token, {@code docs/auth.md}); default SCHEDLOCK_TOKEN_FILE. Used when no token is given.
         */
        public Builder tokenFile(Path tokenFile) {
            this.tokenFile = tokenFile;
            return this;
        }

        Supplier<String> tokenSource() {
            if (token != null && !token.isEmpty()) {
                String fixed = token;
                return () -> fixed;
            }
            return tokenFile != null ? new TokenFile(tokenFile) : () -> null;
        }

        /** Free text recorded in {@code locked_by} with each lease's id; default the host name and the JVM's pid. */
        public Builder holder(String holder) {
            this.holder = Objects.requireNonNull(holder, "holder");
            return this;
        }

        /** How long to wait for a connection (default 5 s). */
        public Builder connectTimeout(Duration timeout) {
            this.connectTimeout = Objects.requireNonNull(timeout, "timeout");
            return this;
        }

        /** How long to wait for each answer (default 10 s); past it the call throws, it never skips. */
        public Builder requestTimeout(Duration timeout) {
            this.requestTimeout = Objects.requireNonNull(timeout, "timeout");
            return this;
        }

        /**
         * Reads {@code schedlock.url}, {@code schedlock.token}, {@code schedlock.holder},
         * {@code schedlock.connect-timeout} and {@code schedlock.request-timeout} (ISO-8601 durations such as
         * {@code PT5S}) where present.
         */
        public Builder properties(Properties properties) {
            String value = properties.getProperty("schedlock.url");
            if (value != null) {
                url(value);
            }
            if (properties.getProperty("schedlock.token") != null) {
                token(properties.getProperty("schedlock.token"));
            }
            if (properties.getProperty("schedlock.holder") != null) {
                holder(properties.getProperty("schedlock.holder"));
            }
            if (properties.getProperty("schedlock.connect-timeout") != null) {
                connectTimeout(Duration.parse(properties.getProperty("schedlock.connect-timeout")));
            }
            if (properties.getProperty("schedlock.request-timeout") != null) {
                requestTimeout(Duration.parse(properties.getProperty("schedlock.request-timeout")));
            }
            return this;
        }

        /**
         * Runs lock {@code name} at most once per tick of a cron schedule, on the database's clock ({@code
         * docs/slots.md}): a trigger for a tick already completed is skipped, whatever the nodes' drift, and
         * {@code lockAtLeastFor} can stay 0. {@code timezone} is an IANA name (null: UTC).
         */
        public Builder oncePer(String name, String schedule, String timezone) {
            ticks.put(Objects.requireNonNull(name, "name"),
                    new Tick(Objects.requireNonNull(schedule, "schedule"), timezone, null));
            return this;
        }

        /** Runs lock {@code name} at most once per slot key, asked of {@code key} at each acquire. */
        public Builder slot(String name, Supplier<String> key) {
            ticks.put(Objects.requireNonNull(name, "name"), new Tick(null, null, Objects.requireNonNull(key, "key")));
            return this;
        }

        /** The provider; its HttpClient is made now and shared by every lock. */
        public SchedlockLockProvider build() {
            if (url == null) {
                String env = System.getenv("SCHEDLOCK_URL");
                url = env == null || env.isBlank() ? DEFAULT_URL : env;
            }
            if (token == null) {
                token = System.getenv("SCHEDLOCK_TOKEN");
            }
            if (tokenFile == null && System.getenv("SCHEDLOCK_TOKEN_FILE") != null
                    && !System.getenv("SCHEDLOCK_TOKEN_FILE").isBlank()) {
                tokenFile = Path.of(System.getenv("SCHEDLOCK_TOKEN_FILE"));
            }
            if (holder == null) {
                holder = defaultHolder();
            }
            return new SchedlockLockProvider(this);
        }

        /** The host name and the pid (ShedLock #317: two JVMs on one host must not pass for one holder). */
        private static String defaultHolder() {
            String host;
            try {
                host = InetAddress.getLocalHost().getHostName();
            } catch (UnknownHostException e) {
                host = Optional.ofNullable(System.getenv("HOSTNAME")).orElse("unknown-host");
            }
            String pid = Long.toString(ProcessHandle.current().pid());
            String text = host.replaceAll("\\p{Cntrl}", "") + " pid " + pid;
            return text.length() <= 128 ? text : text.substring(text.length() - 128);
        }
    }
}
