module github.com/schedlock/schedlock/integrations/go

go 1.22

require (
	github.com/go-co-op/gocron/v2 v2.21.2
	github.com/google/uuid v1.6.0
	github.com/jonboulle/clockwork v0.5.0
)

require github.com/robfig/cron/v3 v3.0.1 // indirect
