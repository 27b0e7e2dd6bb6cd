package dev.schedlock.it.boot;

/** One JSON line on stdout, which the test reads (Spring's own logging is at WARN). */
final class Report {
    private Report() {
    }

    static synchronized void line(String event, int index, String provider, String job, long tick, long fencing) {
        System.out.println("{\"event\":\"" + event + "\",\"jvm\":" + index + ",\"provider\":\"" + provider
                + "\",\"pid\":" + ProcessHandle.current().pid() + ",\"job\":\"" + job + "\",\"tick\":" + tick
                + ",\"fencing_token\":" + fencing + "}");
        System.out.flush();
    }
}
