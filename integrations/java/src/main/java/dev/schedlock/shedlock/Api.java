package dev.schedlock.shedlock;

import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/** schedlock's lock endpoints over the JDK's HttpClient: one POST, one answer, no retry unless asked. */
final class Api {
    private static final Logger log = LoggerFactory.getLogger(Api.class);
    /**
     * An answer schedlock gave: its status, its JSON body, its Retry-After header (null when not sent), and when its
     * request was sent ({@link System#nanoTime()}): a lease it grants ends no earlier than that plus its duration.
     */
    record Answer(int status, Map<String, Object> body, Duration retryAfter, long sent) {
        /** A 429 {@code rate_limited}: the caller is over its quota, no verdict on the lock (docs/auth.md). */
        boolean rateLimited() {
            return status == 429;
        }

        /** The error code of an error answer, or null. */
        String code() {
            return body.get("error") instanceof Map<?, ?> error && error.get("code") instanceof String code ? code : null;
        }

        Object error(String field) {
            return body.get("error") instanceof Map<?, ?> error ? error.get(field) : null;
        }

        SchedlockException failure(String operation, String name) {
            String message = error("message") instanceof String m ? ": " + m : "";
            return new SchedlockException(
                    "schedlock " + operation + " of '" + name + "' answered " + status + " " + code() + message,
                    status, code(), null);
        }
    }

    private final URI base;
    private final Supplier<String> token;
    private final Duration requestTimeout;
    private final HttpClient http;

    Api(URI base, Supplier<String> token, Duration connectTimeout, Duration requestTimeout) {
        this.base = base;
        this.token = token;
        this.requestTimeout = requestTimeout;
        // HTTP/1.1: left at its default the JDK client offers an h2c upgrade on every cleartext request. schedlock
        // ignores the offer, but there is nothing to gain from it, and a proxy in between may not ignore it.
        this.http = HttpClient.newBuilder()
                .version(HttpClient.Version.HTTP_1_1)
                .connectTimeout(connectTimeout)
                .build();
    }

    URI base() {
        return base;
    }

    /** POST /v1/locks/{name}/{operation}; a transport failure or an answer that is not JSON throws. */
    Answer post(String operation, String name, Map<String, ?> fields) {
        HttpRequest.Builder request = HttpRequest.newBuilder(uri(name, operation))
                .timeout(requestTimeout)
                .header("Content-Type", "application/json")
                .header("Accept", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(Json.object(fields), StandardCharsets.UTF_8));
        String bearer = token.get();
        if (bearer != null && !bearer.isEmpty()) {
            request.header("Authorization", "Bearer " + bearer);
        }
        HttpResponse<String> response;
        long sent = System.nanoTime();
        try {
            response = http.send(request.build(), HttpResponse.BodyHandlers.ofString(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new SchedlockException(
                    "schedlock " + operation + " of '" + name + "' failed, " + base + " could not be asked: " + e,
                    0, null, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new SchedlockException("schedlock " + operation + " of '" + name + "' was interrupted", 0, null, e);
        }
        Object body;
        try {
            body = Json.parse(response.body());
        } catch (IllegalArgumentException e) {
            body = null;
        }
        if (!(body instanceof Map<?, ?> map)) {
            // A proxy's error page, or not schedlock at all: the lock's state is unknown.
            String start = response.body().length() > 200 ? response.body().substring(0, 200) : response.body();
            throw new SchedlockException("schedlock " + operation + " of '" + name + "' answered "
                    + response.statusCode() + " with a body that is not schedlock's JSON: " + start,
                    response.statusCode(), null, null);
        }
        @SuppressWarnings("unchecked")
        Map<String, Object> fieldsIn = (Map<String, Object>) map;
        return new Answer(response.statusCode(), fieldsIn, retryAfter(response), sent);
    }

    /** The Retry-After header in seconds (schedlock sends whole seconds), or null. */
    private static Duration retryAfter(HttpResponse<?> response) {
        try {
            return response.headers().firstValue("Retry-After")
                    .map(value -> Duration.ofMillis((long) (Double.parseDouble(value.trim()) * 1000)))
                    .filter(d -> !d.isNegative())
                    .orElse(null);
        } catch (NumberFormatException e) {
            return null; // an HTTP date: not schedlock's
        }
    }

    /**
     * post(), tried up to {@code attempts} times while the service cannot be reached or answers 503: for release
     * and extend, which are safe to repeat (never for acquire, whose lost answer may have taken the lock). A 429
     * {@code rate_limited} (over the caller's quota: no verdict on the lease) is tried again after its Retry-After
     * (1 s without one) as long as the retry is sent before {@code deadline} ({@link System#nanoTime()}: the lease's
     * end as this JVM counts it), however many times; past it, the 429 is returned.
     */
    Answer postRetrying(String operation, String name, Map<String, ?> fields, int attempts, long deadline) {
        for (int attempt = 1; ; ) {
            Duration pause;
            try {
                Answer answer = post(operation, name, fields);
                if (answer.rateLimited()) {
                    pause = answer.retryAfter() != null ? answer.retryAfter() : Duration.ofSeconds(1);
                    if (System.nanoTime() + pause.toNanos() - deadline >= 0) {
                        return answer; // no retry fits before the lease ends
                    }
                    log.warn("schedlock: {} of '{}' is over the caller's quota (429 rate_limited): retrying in {} ms",
                            operation, name, pause.toMillis());
                } else if (answer.status() != 503 || attempt >= attempts) {
                    return answer;
                } else {
                    pause = Duration.ofMillis(200L * attempt++);
                }
            } catch (SchedlockException e) {
                if (attempt >= attempts || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
                pause = Duration.ofMillis(200L * attempt++);
            }
            try {
                Thread.sleep(pause.toMillis());
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new SchedlockException("schedlock " + operation + " of '" + name + "' was interrupted",
                        0, null, e);
            }
        }
    }

    private URI uri(String name, String operation) {
        // A path segment: URLEncoder writes a space as '+', which a path keeps as a plus sign.
        String segment = URLEncoder.encode(name, StandardCharsets.UTF_8).replace("+", "%20");
        String root = base.toString().replaceAll("/+$", "");
        return URI.create(root + "/v1/locks/" + segment + "/" + operation);
    }
}
