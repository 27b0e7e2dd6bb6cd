package schedlock

// Version is the release of every schedlock package (scripts/version bumps it with the others; a test checks).
const Version = "0.1.0"
