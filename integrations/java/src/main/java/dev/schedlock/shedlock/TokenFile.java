package dev.schedlock.shedlock;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.BasicFileAttributes;
import java.util.List;
import java.util.Objects;
import java.util.function.Supplier;

/**
 * A token kept in a file its platform rotates ({@code SCHEDLOCK_TOKEN_FILE}: a Kubernetes projected service-account
 * token): read when made (a missing file throws at once) and again whenever the file's modification time, size or
 * identity change (a projected volume swaps a symlink), so each request sends the current token. A file unreadable
 * after a good read keeps the last token.
 */
final class TokenFile implements Supplier<String> {
    private final Path path;
    private Object state;
    private String token = "";

    TokenFile(Path path) {
        this.path = Objects.requireNonNull(path, "path");
        try {
            read();
        } catch (IOException e) {
            throw new UncheckedIOException("schedlock: cannot read the token file " + path, e);
        }
    }

    @Override
    public synchronized String get() {
        try {
            read();
        } catch (IOException e) {
            // keep the last token: a rotation in progress must not leave requests without one
        }
        return token;
    }

    private void read() throws IOException {
        BasicFileAttributes attributes = Files.readAttributes(path, BasicFileAttributes.class);
        Object now = List.of(attributes.lastModifiedTime(), attributes.size(),
                String.valueOf(attributes.fileKey()));
        if (!now.equals(state)) {
            token = Files.readString(path, StandardCharsets.UTF_8).strip();
            state = now;
        }
    }
}
