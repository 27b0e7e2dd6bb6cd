// Drives examples/java/SchedLock.java for tests/system/polyglot: each scenario prints one JSON object on stdout.
//   java Driver cycle NAME
//   java Driver execute NAME AT_MOST_MS AT_LEAST_MS ok|throw
//   java Driver tick NAME ok|throw slot KEY  |  java Driver tick NAME ok|throw once-per CRON ZONE

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;

public final class Driver {
    public static void main(String[] args) {
        SchedLock locks = SchedLock.fromEnvironment();
        String json = switch (args[0]) {
            case "cycle" -> cycle(locks, args[1]);
            case "execute" -> execute(locks, args[1], Long.parseLong(args[2]), Long.parseLong(args[3]), args[4]);
            case "tick" -> tick(locks, args[1], args[2],
                    args[3].equals("slot") ? SchedLock.Tick.slot(args[4]) : SchedLock.Tick.oncePer(args[4], args[5]));
            default -> throw new IllegalArgumentException(args[0]);
        };
        System.out.println(json);
    }

    private static String cycle(SchedLock locks, String name) {
        SchedLock.Lease lease = locks.tryLock(name, Duration.ofMinutes(10), Duration.ZERO).orElseThrow();
        String firstUntil = lease.lockUntil().toString();
        Optional<SchedLock.Lease> second = locks.tryLock(name, Duration.ofMinutes(10), Duration.ZERO);
        boolean extended = lease.extend(Duration.ofMinutes(20));
        String extendedUntil = lease.lockUntil().toString();
        lease.release();
        Map<String, Object> row = locks.get(name).orElseThrow();
        List<String> listed = new ArrayList<>();
        for (Map<String, Object> item : locks.list(name)) {
            listed.add(quote((String) item.get("name")));
        }
        return "{\"fencing_token\":" + lease.fencingToken() + ",\"first_lock_until\":" + quote(firstUntil)
                + ",\"second\":" + quote(second.isPresent() ? "acquired" : "held") + ",\"extended\":" + extended
                + ",\"extended_lock_until\":" + quote(extendedUntil) + ",\"get_held\":" + row.get("held")
                + ",\"get_fencing_token\":" + row.get("fencing_token") + ",\"listed\":" + listed + "}";
    }

    private static String execute(SchedLock locks, String name, long atMostMs, long atLeastMs, String mode) {
        long[] fencing = {-1};
        String outcome;
        try {
            outcome = locks.executeWithLock(() -> {
                fencing[0] = SchedLock.assertLocked().fencingToken();
                if (mode.equals("throw")) {
                    throw new IllegalStateException("the job failed");
                }
            }, name, Duration.ofMillis(atMostMs), Duration.ofMillis(atLeastMs)).name().toLowerCase();
        } catch (IllegalStateException e) {
            outcome = "threw";
        } catch (SchedLock.LockRequestRejected e) {
            return "{\"outcome\":\"rejected\",\"status\":" + e.status + ",\"code\":" + quote(e.code) + "}";
        }
        String outside;
        try {
            SchedLock.assertLocked();
            outside = "allowed";
        } catch (IllegalStateException e) {
            outside = "refused";
        }
        return "{\"outcome\":" + quote(outcome) + ",\"fencing_token\":" + (fencing[0] < 0 ? "null" : fencing[0])
                + ",\"assert_outside\":" + quote(outside) + "}";
    }

    private static String tick(SchedLock locks, String name, String mode, SchedLock.Tick tick) {
        String[] slot = {null};
        String outcome;
        try {
            outcome = locks.executeWithLock(() -> {
                slot[0] = SchedLock.assertLocked().slot();
                if (mode.equals("throw")) {
                    throw new IllegalStateException("the job failed");
                }
            }, name, Duration.ofMinutes(1), Duration.ZERO, tick).name().toLowerCase();
        } catch (IllegalStateException e) {
            outcome = "threw";
        }
        return "{\"outcome\":" + quote(outcome) + ",\"slot\":" + (slot[0] == null ? "null" : quote(slot[0])) + "}";
    }

    private static String quote(String value) {
        return "\"" + value.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
    }
}
