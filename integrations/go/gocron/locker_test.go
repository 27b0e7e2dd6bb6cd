package schedlockgocron

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/schedlock/schedlock/integrations/go/schedlock"
)

// syncBuffer is a log destination the scheduler's goroutines and the test share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// ticks are the "tick" attributes of the Locker's fail-open warnings so far.
func (b *syncBuffer) ticks(t *testing.T) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var found []string
	for _, line := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var record map[string]any
		if err := json.Unmarshal([]byte(line), &record); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		if tick, ok := record["tick"].(string); ok && strings.Contains(record["msg"].(string), "WITHOUT a lock") {
			found = append(found, tick)
		}
	}
	return found
}

// nowhere is a loopback address nothing listens on: every request fails at once, and FailOpen runs the job.
func nowhere(t *testing.T) string {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return "http://" + address
}

// The witness of what the Locker relies on in gocron: when Lock is called for a scheduled run, the job's next run
// is still that run's scheduled time, so the slot is the tick the schedule names, to the millisecond; for RunNow
// there is no due tick, and the lock is taken without a slot.
func TestTheTickIsTheScheduledTimeOfTheRunBeingLocked(t *testing.T) {
	logs := &syncBuffer{}
	locker := NewLocker(Options{
		Client:   &schedlock.Client{URL: nowhere(t)},
		FailOpen: true,
		Logger:   slog.New(slog.NewJSONHandler(logs, nil)),
	})
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		t.Fatal(err)
	}
	locker.Attach(s)
	ran := make(chan time.Time, 10)
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(func() { ran <- time.Now() }),
		gocron.WithName("every-second")); err != nil {
		t.Fatal(err)
	}
	yearly, err := s.NewJob(gocron.CronJob("0 0 0 1 1 *", true), gocron.NewTask(func() {}), gocron.WithName("yearly"))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	defer func() { _ = s.Shutdown() }()
	for i := 0; i < 2; i++ {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run twice in 10 s")
		}
	}
	scheduled := logs.ticks(t)
	if len(scheduled) < 2 {
		t.Fatalf("ticks %v", scheduled)
	}
	for i, tick := range scheduled[:2] {
		at, err := time.Parse("2006-01-02T15:04:05.000Z07:00", tick)
		if err != nil || !strings.HasSuffix(tick, ".000Z") || at.After(time.Now()) {
			t.Fatalf("tick %d is %q, not a whole second in the past", i, tick)
		}
		if i > 0 {
			previous, _ := time.Parse("2006-01-02T15:04:05.000Z07:00", scheduled[i-1])
			if at.Sub(previous) != time.Second {
				t.Fatalf("ticks %v are not one second apart", scheduled)
			}
		}
	}

	if err := yearly.RunNow(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !containsEmpty(logs.ticks(t)) {
		if time.Now().After(deadline) {
			t.Fatalf("RunNow was not locked without a slot: ticks %v", logs.ticks(t))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsEmpty(ticks []string) bool {
	for _, tick := range ticks {
		if tick == "" {
			return true
		}
	}
	return false
}

// The slot key is the server's tick form exactly (docs/slots.md), whatever the time's zone or precision: only keys
// of that form are kept in order, so that a late trigger of an older tick is refused.
func TestTheTickKeyIsTheServersTickForm(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	for at, want := range map[time.Time]string{
		time.Date(2026, 11, 30, 4, 0, 0, 0, berlin):           "2026-11-30T03:00:00.000Z",
		time.Date(2026, 11, 30, 3, 0, 0, 123456789, time.UTC): "2026-11-30T03:00:00.123Z",
		time.Date(999, 1, 2, 3, 4, 5, 0, time.UTC):            "0999-01-02T03:04:05.000Z",
	} {
		if got := tickKey(at); got != want {
			t.Errorf("tickKey(%v) = %q, want %q", at, got, want)
		}
	}
}

// A 429 rate_limited on acquire (this caller over its quota) skips the run with a warning: Lock's error wraps
// ErrRateLimited, not ErrUnavailable, nothing is logged as an error, and FailOpen does not run it without a lock.
func TestOverItsQuotaARunIsSkippedWithAWarningNotAnOutage(t *testing.T) {
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error": {"code": "rate_limited", "message": "over quota", "retry_after": 3}}`))
	}))
	defer server.Close()
	for _, failOpen := range []bool{false, true} {
		logs := &syncBuffer{}
		locker := NewLocker(Options{
			Client:   &schedlock.Client{URL: server.URL},
			FailOpen: failOpen,
			Logger:   slog.New(slog.NewJSONHandler(logs, nil)),
		})
		lock, err := locker.Lock(context.Background(), "job")
		if lock != nil || !errors.Is(err, ErrRateLimited) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("FailOpen %v: Lock gave %v, %v", failOpen, lock, err)
		}
		var record map[string]any
		if err := json.Unmarshal(logs.buf.Bytes(), &record); err != nil {
			t.Fatalf("not one JSON log line: %q", logs.buf.String())
		}
		if record["level"] != "WARN" || !strings.Contains(record["msg"].(string), "over this caller's quota") ||
			record["retry_after"] != float64(3*time.Second) {
			t.Fatalf("FailOpen %v: logged %v", failOpen, record)
		}
	}
}
