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

/** schedlock's lock endpoints over the JDK's HttpClient: one POST, one answer, no retry unless asked. */
final class Api {
    /** An answer schedlock gave: its status and its JSON body. */
    record Answer(int status, Map<String, Object> body) {
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
        return new Answer(response.statusCode(), fieldsIn);
    }

    /**
     * post(), tried up to {@code attempts} times while the service cannot be reached or answers 503: for release
     * and extend, which are safe to repeat (never for acquire, whose lost answer may have taken the lock).
     */
    Answer postRetrying(String operation, String name, Map<String, ?> fields, int attempts) {
        for (int attempt = 1; ; attempt++) {
            try {
                Answer answer = post(operation, name, fields);
                if (answer.status() != 503 || attempt >= attempts) {
                    return answer;
                }
            } catch (SchedlockException e) {
                if (attempt >= attempts || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
            }
            try {
                Thread.sleep(200L * attempt);
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
