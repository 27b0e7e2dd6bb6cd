// schedlock for Java: one file, JDK 17 only (java.net.http), shaped like ShedLock's LockingTaskExecutor.
//
// Copy it into your project (add your `package` line). Run it as it is, against a running service:
//
//   SCHEDLOCK_URL=http://schedlock:8000 SCHEDLOCK_TOKEN=... java SchedLock.java nightly-report PT14M PT5M
//
// Usage in code:
//
//   SchedLock locks = SchedLock.fromEnvironment();              // SCHEDLOCK_URL, SCHEDLOCK_TOKEN
//   locks.executeWithLock(this::sendReport, "nightly-report", Duration.ofMinutes(14), Duration.ofMinutes(5));
//
// The task is skipped, never waited for, when another node holds the lock. When the service cannot be reached the
// task is skipped too (fail-closed) and an ERROR is logged: nobody runs while the lock's state is unknown. A request
// the service rejects (bad name or duration, missing or wrong token) throws LockRequestRejected: a configuration bug
// is never mistaken for "held".
//
// Once per tick (docs/slots.md): executeWithLock(task, name, lockAtMostFor, Duration.ZERO, Tick.oncePer("0 3 * * *",
// "Europe/Berlin")) runs the task at most once per tick of the schedule, by the database's clock: a tick already done
// is skipped (SKIPPED_DONE), and a task that throws leaves its tick open for another node. Tick.slot(key) takes a
// tick key of your own.

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

public final class SchedLock {
    /** What executeWithLock did with the task. */
    public enum Outcome { EXECUTED, SKIPPED_HELD, SKIPPED_DONE, SKIPPED_UNAVAILABLE }

    /** Which tick a run is for: a cron schedule's latest by the database's clock, or a key of your own. */
    public record Tick(String schedule, String timezone, String slot) {
        /** The latest tick of a cron schedule (5 fields, or @daily, ...) in UTC. */
        public static Tick oncePer(String schedule) { return new Tick(schedule, null, null); }

        /** The latest tick of a cron schedule read in an IANA time zone (DST as Debian's cron). */
        public static Tick oncePer(String schedule, String timezone) { return new Tick(schedule, timezone, null); }

        /** A tick key of your own, 1-64 characters: "2026-11-30", "batch-42". */
        public static Tick slot(String key) { return new Tick(null, null, key); }

        private String json() {
            return (schedule == null ? "" : ",\"schedule\":" + quote(schedule))
                    + (timezone == null ? "" : ",\"timezone\":" + quote(timezone))
                    + (slot == null ? "" : ",\"slot\":" + quote(slot));
        }
    }

    private static final System.Logger LOG = System.getLogger(SchedLock.class.getName());
    // The leases of the tasks running on this thread, innermost last: what assertLocked() checks.
    private static final ThreadLocal<Deque<Lease>> CURRENT = ThreadLocal.withInitial(ArrayDeque::new);

    private final String baseUrl;
    private final String apiToken;
    private final HttpClient http;
    private final Duration timeout;

    /** A client for the service at baseUrl; apiToken may be null when the server has no tokens configured. */
    public SchedLock(String baseUrl, String apiToken, HttpClient http, Duration timeout) {
        this.baseUrl = baseUrl.replaceAll("/+$", "");
        this.apiToken = apiToken == null || apiToken.isEmpty() ? null : apiToken;
        this.http = http;
        this.timeout = timeout;
    }

    /** SCHEDLOCK_URL (default http://127.0.0.1:8000) and SCHEDLOCK_TOKEN, with the JDK's HttpClient as it comes. */
    public static SchedLock fromEnvironment() {
        String url = System.getenv().getOrDefault("SCHEDLOCK_URL", "http://127.0.0.1:8000");
        return new SchedLock(url, System.getenv("SCHEDLOCK_TOKEN"), HttpClient.newHttpClient(), Duration.ofSeconds(10));
    }

    /** Runs task under the lock `name`, or skips it: ShedLock's executeWithLock(task, lockConfiguration). */
    public Outcome executeWithLock(Runnable task, String name, Duration lockAtMostFor, Duration lockAtLeastFor) {
        return executeWithLock(task, name, lockAtMostFor, lockAtLeastFor, null);
    }

    /** executeWithLock at most once per tick: a tick already completed is SKIPPED_DONE (tick null: no tick). */
    public Outcome executeWithLock(
            Runnable task, String name, Duration lockAtMostFor, Duration lockAtLeastFor, Tick tick) {
        Attempt attempt;
        try {
            attempt = attempt(name, lockAtMostFor, lockAtLeastFor, tick);
        } catch (LockServiceUnavailable e) {
            LOG.log(System.Logger.Level.ERROR, "lock service unavailable, {0} not run: {1}", name, e.getMessage());
            return Outcome.SKIPPED_UNAVAILABLE;
        }
        if (attempt.lease == null) {
            return attempt.skipped;
        }
        Deque<Lease> current = CURRENT.get();
        current.addLast(attempt.lease);
        boolean completed = false;
        try {
            task.run();
            completed = true;
            return Outcome.EXECUTED;
        } finally {
            current.removeLast();
            // Also when the task threw (the lock stays until locked_at + lockAtLeastFor), leaving its tick open.
            attempt.lease.releaseQuietly(completed);
        }
    }

    /**
     * ShedLock's LockAssert.assertLocked(): throws unless this thread runs a task under a lease that still lives.
     * Returns that lease, for its fencingToken().
     */
    public static Lease assertLocked() {
        Lease lease = CURRENT.get().peekLast();
        if (lease == null) {
            throw new IllegalStateException("The task is not locked.");
        }
        if (lease.released || System.nanoTime() >= lease.deadlineNanos) {
            throw new IllegalStateException("The lock " + lease.name + " has expired or was released.");
        }
        return lease;
    }

    /** Takes the lock, or returns empty at once when another holder has it. */
    public Optional<Lease> tryLock(String name, Duration lockAtMostFor, Duration lockAtLeastFor) {
        return tryLock(name, lockAtMostFor, lockAtLeastFor, null);
    }

    /** tryLock for a tick: also empty when the tick was already completed, held or not. */
    public Optional<Lease> tryLock(String name, Duration lockAtMostFor, Duration lockAtLeastFor, Tick tick) {
        return Optional.ofNullable(attempt(name, lockAtMostFor, lockAtLeastFor, tick).lease);
    }

    private record Attempt(Lease lease, Outcome skipped) {}

    private Attempt attempt(String name, Duration lockAtMostFor, Duration lockAtLeastFor, Tick tick) {
        String holder = "java on " + hostname() + " pid " + ProcessHandle.current().pid();
        String body = "{\"lock_at_most_for\":" + quote(lockAtMostFor.toString())
                + ",\"lock_at_least_for\":" + quote(lockAtLeastFor.toString()) + ",\"holder\":" + quote(holder)
                + (tick == null ? "" : tick.json()) + "}";
        long sentAt = System.nanoTime();
        Reply reply = call("POST", lockPath(name) + "/acquire", body);
        if (reply.status == 409 && "lock_held".equals(reply.code())) {
            Map<String, Object> error = reply.error();
            LOG.log(System.Logger.Level.INFO, "{0} is held by {1} until {2}: skipped",
                    name, error.get("locked_by"), error.get("lock_until"));
            return new Attempt(null, Outcome.SKIPPED_HELD);
        }
        if (reply.status == 409 && "slot_done".equals(reply.code())) {
            Map<String, Object> error = reply.error();
            LOG.log(System.Logger.Level.INFO, "{0}: the tick {1} was completed at {2}: skipped",
                    name, error.get("slot"), error.get("completed_at"));
            return new Attempt(null, Outcome.SKIPPED_DONE);
        }
        reply.expect(200);
        return new Attempt(new Lease(this, name, reply.body, sentAt), null);
    }

    /** The lock's row (GET /v1/locks/{name}), or empty when no such lock exists. */
    public Optional<Map<String, Object>> get(String name) {
        Reply reply = call("GET", lockPath(name), null);
        if (reply.status == 404 && "lock_not_found".equals(reply.code())) {
            return Optional.empty();
        }
        return Optional.of(reply.expect(200).body);
    }

    /** Every lock whose name starts with prefix, in name order, following the pages. */
    @SuppressWarnings("unchecked")
    public List<Map<String, Object>> list(String prefix) {
        List<Map<String, Object>> locks = new ArrayList<>();
        String cursor = null;
        do {
            String query = "?prefix=" + encode(prefix) + (cursor == null ? "" : "&cursor=" + encode(cursor));
            Map<String, Object> page = call("GET", "/v1/locks" + query, null).expect(200).body;
            for (Object item : (List<Object>) page.get("items")) {
                locks.add((Map<String, Object>) item);
            }
            cursor = (String) page.get("next_cursor");
        } while (cursor != null);
        return locks;
    }

    /** A lock this process holds. close() releases it, so it fits try-with-resources. */
    public static final class Lease implements AutoCloseable {
        private final SchedLock client;
        private final String name;
        private final String token;
        private final long fencingToken;
        private final String slot;
        private volatile Instant lockUntil;
        private volatile long deadlineNanos; // lock_until on this machine's monotonic clock: immune to clock skew
        private volatile boolean released;

        private Lease(SchedLock client, String name, Map<String, Object> acquired, long sentAt) {
            this.client = client;
            this.name = name;
            this.token = (String) acquired.get("token");
            this.fencingToken = ((Number) acquired.get("fencing_token")).longValue();
            this.slot = (String) acquired.get("slot");
            update(acquired, sentAt);
        }

        public String name() { return name; }

        /** The tick this lease runs (a Tick's), or null. */
        public String slot() { return slot; }

        /** Strictly increases with every acquisition of this name: hand it to what the task writes. */
        public long fencingToken() { return fencingToken; }

        /** When the lock frees itself unless extended (the database's clock). */
        public Instant lockUntil() { return lockUntil; }

        /** Moves lock_until to now + lockAtMostFor. False when the lease was lost (expired and maybe taken). */
        public boolean extend(Duration lockAtMostFor) {
            long sentAt = System.nanoTime();
            Reply reply = client.call("POST", lockPath(name) + "/extend",
                    "{\"token\":" + quote(token) + ",\"lock_at_most_for\":" + quote(lockAtMostFor.toString()) + "}");
            if (reply.status == 409 || reply.status == 404) {
                deadlineNanos = sentAt; // lost: assertLocked() fails from now on
                return false;
            }
            update(reply.expect(200).body, sentAt);
            return true;
        }

        /** Releases the lock; it stays held until locked_at + lockAtLeastFor. Idempotent, so it retries. */
        public void release() { release(true); }

        /** Releases the lock; completed false (the task failed) leaves the lease's tick open for another run. */
        public void release(boolean completed) {
            String body = "{\"token\":" + quote(token) + ",\"completed\":" + completed + "}";
            for (int attempt = 1; ; attempt++) {
                try {
                    Reply reply = client.call("POST", lockPath(name) + "/release", body);
                    if (reply.status != 409) { // 409 not_holder: someone took it over after it expired; nothing to do
                        reply.expect(200);
                    }
                    released = true;
                    return;
                } catch (LockServiceUnavailable e) {
                    if (attempt == 3) {
                        throw e;
                    }
                    sleep(Duration.ofMillis(200L * attempt));
                }
            }
        }

        @Override
        public void close() { release(); }

        private void releaseQuietly(boolean completed) {
            try {
                release(completed);
            } catch (RuntimeException e) {
                LOG.log(System.Logger.Level.WARNING, "could not release {0}; it frees itself at {1}: {2}",
                        name, lockUntil, e.getMessage());
            }
        }

        private void update(Map<String, Object> body, long sentAt) {
            lockUntil = Instant.parse((String) body.get("lock_until"));
            Duration left = Duration.between(Instant.parse((String) body.get("db_time")), lockUntil);
            deadlineNanos = sentAt + left.toNanos();
        }
    }

    /** The service could not be asked, or did not answer: the lock's state is unknown. */
    public static class LockServiceUnavailable extends RuntimeException {
        private static final long serialVersionUID = 1L;

        LockServiceUnavailable(String message, Throwable cause) { super(message, cause); }
    }

    /** The service refused the request (422 invalid_request, 401 unauthorized, 403 forbidden, ...). */
    public static class LockRequestRejected extends RuntimeException {
        private static final long serialVersionUID = 1L;
        public final int status;
        public final String code;

        LockRequestRejected(int status, String code, String message) {
            super(status + " " + code + ": " + message);
            this.status = status;
            this.code = code;
        }
    }

    private record Reply(int status, Map<String, Object> body) {
        @SuppressWarnings("unchecked")
        Map<String, Object> error() {
            Object error = body.get("error");
            return error instanceof Map ? (Map<String, Object>) error : Map.of();
        }

        String code() { return String.valueOf(error().get("code")); }

        Reply expect(int wanted) {
            if (status != wanted) {
                throw new LockRequestRejected(status, code(), String.valueOf(error().get("message")));
            }
            return this;
        }
    }

    @SuppressWarnings("unchecked")
    private Reply call(String method, String path, String json) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(baseUrl + path))
                .timeout(timeout)
                .header("accept", "application/json");
        if (apiToken != null) {
            request.header("authorization", "Bearer " + apiToken);
        }
        if (json == null) {
            request.GET();
        } else {
            request.header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofString(json));
        }
        HttpResponse<String> response;
        try {
            response = http.send(request.build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new LockServiceUnavailable("lock service unreachable at " + baseUrl + ": " + e, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new LockServiceUnavailable("interrupted while calling the lock service", e);
        }
        Object body;
        try {
            body = new Json(response.body()).parse();
        } catch (IllegalArgumentException e) {
            body = null;
        }
        // A 5xx, or an answer that is not schedlock's JSON (a proxy's error page): the lock's state is unknown.
        if (response.statusCode() >= 500 || !(body instanceof Map)) {
            throw new LockServiceUnavailable("lock service answered " + response.statusCode() + ": "
                    + response.body().substring(0, Math.min(200, response.body().length())), null);
        }
        return new Reply(response.statusCode(), (Map<String, Object>) body);
    }

    private static String lockPath(String name) { return "/v1/locks/" + encode(name); }

    /** Percent-encodes every byte but RFC 3986's unreserved characters: safe in a path segment and a query. */
    private static String encode(String value) {
        StringBuilder out = new StringBuilder();
        for (byte b : value.getBytes(StandardCharsets.UTF_8)) {
            char c = (char) (b & 0xff);
            if (Character.isLetterOrDigit(c) && c < 128 || "-._~".indexOf(c) >= 0) {
                out.append(c);
            } else {
                out.append(String.format("%%%02X", b & 0xff));
            }
        }
        return out.toString();
    }

    private static String quote(String value) {
        StringBuilder out = new StringBuilder("\"");
        for (char c : value.toCharArray()) {
            switch (c) {
                case '"' -> out.append("\\\"");
                case '\\' -> out.append("\\\\");
                default -> out.append(c < 0x20 ? String.format("\\u%04x", (int) c) : String.valueOf(c));
            }
        }
        return out.append('"').toString();
    }

    private static String hostname() {
        String host = System.getenv("HOSTNAME");
        if (host != null && !host.isEmpty()) {
            return host;
        }
        try {
            return java.net.InetAddress.getLocalHost().getHostName();
        } catch (IOException e) {
            return "unknown-host";
        }
    }

    private static void sleep(Duration pause) {
        try {
            Thread.sleep(pause.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Just enough JSON for the API's answers: objects, arrays, strings, numbers, true, false, null. */
    private static final class Json {
        private final String text;
        private int at;

        Json(String text) { this.text = text; }

        Object parse() {
            Object value = value();
            skipSpace();
            if (at != text.length()) {
                throw new IllegalArgumentException("trailing characters at " + at);
            }
            return value;
        }

        private Object value() {
            skipSpace();
            if (at >= text.length()) {
                throw new IllegalArgumentException("unexpected end");
            }
            char c = text.charAt(at);
            switch (c) {
                case '{': return object();
                case '[': return array();
                case '"': return string();
                default:
                    for (String word : new String[] {"true", "false", "null"}) {
                        if (text.startsWith(word, at)) {
                            at += word.length();
                            return word.equals("null") ? null : Boolean.valueOf(word);
                        }
                    }
                    return number();
            }
        }

        private Map<String, Object> object() {
            Map<String, Object> map = new LinkedHashMap<>();
            at++;
            skipSpace();
            if (peek('}')) {
                return map;
            }
            do {
                skipSpace();
                String key = string();
                skipSpace();
                expect(':');
                map.put(key, value());
                skipSpace();
            } while (peek(','));
            expect('}');
            return map;
        }

        private List<Object> array() {
            List<Object> list = new ArrayList<>();
            at++;
            skipSpace();
            if (peek(']')) {
                return list;
            }
            do {
                list.add(value());
                skipSpace();
            } while (peek(','));
            expect(']');
            return list;
        }

        private String string() {
            expect('"');
            StringBuilder out = new StringBuilder();
            while (true) {
                if (at >= text.length()) {
                    throw new IllegalArgumentException("unterminated string");
                }
                char c = text.charAt(at++);
                if (c == '"') {
                    return out.toString();
                }
                if (c != '\\') {
                    out.append(c);
                    continue;
                }
                char escaped = text.charAt(at++);
                switch (escaped) {
                    case 'b' -> out.append('\b');
                    case 'f' -> out.append('\f');
                    case 'n' -> out.append('\n');
                    case 'r' -> out.append('\r');
                    case 't' -> out.append('\t');
                    case 'u' -> {
                        out.append((char) Integer.parseInt(text.substring(at, at + 4), 16));
                        at += 4;
                    }
                    default -> out.append(escaped);
                }
            }
        }

        private Number number() {
            int start = at;
            while (at < text.length() && "+-0123456789.eE".indexOf(text.charAt(at)) >= 0) {
                at++;
            }
            String digits = text.substring(start, at);
            try {
                return digits.matches("-?\\d+") ? (Number) Long.valueOf(digits) : (Number) Double.valueOf(digits);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("not JSON at " + start);
            }
        }

        private void skipSpace() {
            while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
                at++;
            }
        }

        private boolean peek(char c) {
            if (at < text.length() && text.charAt(at) == c) {
                at++;
                return true;
            }
            return false;
        }

        private void expect(char c) {
            if (!peek(c)) {
                throw new IllegalArgumentException("expected '" + c + "' at " + at);
            }
        }
    }

    /** java SchedLock.java NAME [AT_MOST [AT_LEAST]]: runs a demo task under the lock (durations in ISO-8601). */
    public static void main(String[] args) {
        if (args.length < 1 || args.length > 3) {
            System.err.println("usage: java SchedLock.java NAME [AT_MOST [AT_LEAST]]   e.g. nightly-report PT14M PT5M");
            System.exit(2);
        }
        String name = args[0];
        Duration atMost = Duration.parse(args.length > 1 ? args[1] : "PT14M");
        Duration atLeast = Duration.parse(args.length > 2 ? args[2] : "PT0S");

        SchedLock locks = SchedLock.fromEnvironment(); // SCHEDLOCK_URL and SCHEDLOCK_TOKEN
        Outcome outcome = locks.executeWithLock(() -> {
            long fencingToken = SchedLock.assertLocked().fencingToken(); // hand it to what the task writes
            System.out.println("running " + name + " with fencing token " + fencingToken);
        }, name, atMost, atLeast);

        System.out.println(outcome); // EXECUTED, SKIPPED_HELD or SKIPPED_UNAVAILABLE
        System.exit(outcome == Outcome.SKIPPED_UNAVAILABLE ? 69 : 0);
    }
}
