module schedlock.test/driver

go 1.19

require example.com/schedlock v0.0.0

replace example.com/schedlock => ../../../../examples/go
