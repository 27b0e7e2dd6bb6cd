module example.com/schedlock

go 1.19
