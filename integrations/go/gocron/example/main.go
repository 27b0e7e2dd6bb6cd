// Command example is a gocron scheduler whose job runs once per tick across every process that runs it, with
// schedlock. The suite runs it as several processes against a live server
// (tests/system/integrations/test_node_cron_gocron.py); the knobs in the environment are for that: JOB_NAME, SCHEDULE
// (six fields: seconds too), LEASE_MS, JOB=ok|fail|hang, FAIL_OPEN, and CLOCK_BEHIND_MS (a machine whose clock is
// slow). Each thing it does is one JSON line on stdout.
package main

import (
	"encoding/json"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jonboulle/clockwork"

	schedlockgocron "github.com/schedlock/schedlock/integrations/go/gocron"
)

func main() {
	name, schedule := env("JOB_NAME", "nightly-report"), env("SCHEDULE", "0 0 3 * * *")
	atMost, _ := strconv.Atoi(env("LEASE_MS", "600000"))
	behindMs, _ := strconv.Atoi(env("CLOCK_BEHIND_MS", "0"))

	// SCHEDLOCK_URL and SCHEDLOCK_TOKEN come from the environment.
	locker := schedlockgocron.NewLocker(schedlockgocron.Options{
		AtMostFor: time.Duration(atMost) * time.Millisecond, // a dead holder blocks others no longer than this
		FailOpen:  os.Getenv("FAIL_OPEN") == "1",
	})
	scheduler, err := gocron.NewScheduler(
		gocron.WithDistributedLocker(locker),
		gocron.WithClock(behind{clockwork.NewRealClock(), time.Duration(behindMs) * time.Millisecond}),
	)
	if err != nil {
		panic(err)
	}
	locker.Attach(scheduler) // Lock learns from the scheduler which tick each run is for

	_, err = scheduler.NewJob(
		gocron.CronJob(schedule, true),
		gocron.NewTask(func() error { return sendReport(locker.Tick(name)) }),
		gocron.WithName(name),  // the lock's name; each tick is a slot of it
		locker.TrackFailures(), // a run that returns an error leaves its tick open
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			emit(map[string]any{"event": "skipped", "reason": reason(err)})
		})),
	)
	if err != nil {
		panic(err)
	}
	scheduler.Start()
	emit(map[string]any{"event": "ready"})

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, os.Interrupt)
	<-stop
	_ = scheduler.Shutdown()
}

// sendReport is the job: it says which tick it runs, then does what JOB says.
func sendReport(tick string) error {
	emit(map[string]any{"event": "started", "tick": tick})
	switch os.Getenv("JOB") {
	case "fail":
		emit(map[string]any{"event": "failed", "tick": tick})
		return errors.New("the report service is down")
	case "hang":
		select {} // never ends: the holder is killed
	}
	emit(map[string]any{"event": "finished", "tick": tick})
	return nil
}

func reason(err error) string {
	switch {
	case errors.Is(err, schedlockgocron.ErrHeld):
		return "held"
	case errors.Is(err, schedlockgocron.ErrDone):
		return "done"
	case errors.Is(err, schedlockgocron.ErrRateLimited):
		return "rate-limited"
	case errors.Is(err, schedlockgocron.ErrUnavailable):
		return "unavailable"
	}
	return err.Error()
}

func emit(event map[string]any) {
	event["pid"] = os.Getpid()
	line, _ := json.Marshal(event)
	os.Stdout.Write(append(line, '\n'))
}

func env(key, fallback string) string {
	if value := os.Getenv(key); value != "" {
		return value
	}
	return fallback
}

// behind is the machine's clock, set back: the scheduler of a machine whose clock is slow.
type behind struct {
	clockwork.Clock
	by time.Duration
}

func (c behind) Now() time.Time                  { return c.Clock.Now().Add(-c.by) }
func (c behind) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c behind) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
