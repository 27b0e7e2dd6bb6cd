// Package schedlockgocron is a gocron v2 distributed Locker on schedlock: each scheduled run of a job runs on one
// scheduler only, across every process that runs it, and a failed run leaves its tick open for another.
//
//	locker := schedlockgocron.NewLocker(schedlockgocron.Options{AtMostFor: 10 * time.Minute})
//	s, _ := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
//	locker.Attach(s)
//	s.NewJob(gocron.CronJob("0 3 * * *", false), gocron.NewTask(report), gocron.WithName("report"), locker.TrackFailures())
//
// gocron calls Lock(ctx, jobName) before each run and Unlock after it; the key is the job's name only. The tick the
// run is for comes from the scheduler (Attach): the job's next scheduled run, which gocron moves on only after the
// lock is taken. Lock takes the lock named after the job with that tick as the slot (docs/slots.md), and Unlock
// releases it as completed, so a scheduler whose trigger for the same tick comes later skips it, whatever the
// schedulers' clocks say. gocron tells Unlock nothing of the run's outcome: TrackFailures adds the job option
// through which a run that returned an error or panicked releases with completed: false, leaving the tick open.
//
// When schedlock cannot be asked, Lock logs an error and returns one: gocron skips the run (fail-closed) and calls
// the job's AfterLockError listener. With Options.FailOpen the run goes ahead without a lock and a warning is logged.
// A 429 rate_limited (this caller over its quota) is neither: the run is skipped with a warning, as another
// scheduler may run it, and a release answered 429 is sent again after its Retry-After.
// Requests go through the schedlock package of this module (the standard library's net/http), besides gocron itself
// (and its uuid, which its listeners' signatures name).
package schedlockgocron

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"

	"github.com/schedlock/schedlock/integrations/go/schedlock"
)

// The errors Lock returns wrap these (errors.Is): the schedlock package's sentinels.
var (
	// ErrHeld: another holder has the lock; the run is skipped.
	ErrHeld = schedlock.ErrHeld
	// ErrDone: the tick was already completed; the run is skipped.
	ErrDone = schedlock.ErrDone
	// ErrUnavailable: the service could not be asked or did not answer; the lock's state is unknown.
	ErrUnavailable = schedlock.ErrUnavailable
	// ErrRateLimited: this caller is over its quota (429 rate_limited, docs/auth.md); the run is skipped with a
	// warning, not taken for an outage (FailOpen does not apply).
	ErrRateLimited = schedlock.ErrRateLimited
)

// APIError is a request the service rejected: 422 invalid_request (a bad job name as a lock name), 401
// unauthorized, 403 forbidden, ... A configuration bug, never taken for a skip.
type APIError = schedlock.APIError

// How early a tick may look by this machine's clock and still be the run in progress: a timer never fires early,
// but the wall clock may have been stepped back a little since gocron computed the tick. A RunNow this close before
// a tick is taken for that tick.
const earlyTolerance = 100 * time.Millisecond

// Options configure a Locker; the zero value works (the service from SCHEDLOCK_URL and SCHEDLOCK_TOKEN).
type Options struct {
	Client    *schedlock.Client           // the service; default FromEnv()
	AtMostFor time.Duration               // lock_at_most_for: how long a dead holder blocks others; default 10 minutes
	LockName  func(jobName string) string // the lock of a job; default the job's name
	FailOpen  bool                        // run without a lock when schedlock cannot be asked; default false
	Logger    *slog.Logger                // default slog.Default()
	Holder    string                      // recorded in locked_by; default "gocron on HOST pid PID"
}

// Locker is gocron's Locker (gocron.WithDistributedLocker or gocron.WithDistributedJobLocker) on schedlock.
type Locker struct {
	opts      Options
	mu        sync.Mutex
	scheduler gocron.Scheduler
	running   map[string]*lease // by lock name: the runs holding a lock in this process
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker makes a Locker; call Attach with the scheduler it serves before starting that scheduler.
func NewLocker(opts Options) *Locker {
	if opts.Client == nil {
		opts.Client = FromEnv()
	}
	if opts.AtMostFor <= 0 {
		opts.AtMostFor = 10 * time.Minute
	}
	if opts.LockName == nil {
		opts.LockName = func(jobName string) string { return jobName }
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	return &Locker{opts: opts, running: map[string]*lease{}}
}

// Attach tells the Locker which scheduler it serves, so that Lock knows the tick each run is for. Without it (or for
// a run that is not a scheduled tick, such as Job.RunNow) the lock is taken without a slot: at most one run at a
// time, but a scheduler whose trigger comes after the run ended runs the tick again.
func (l *Locker) Attach(s gocron.Scheduler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.scheduler = s
}

// TrackFailures is the job option that reports a run's error or panic to the Locker, so that its release leaves the
// tick open (completed: false). It sets the job's AfterJobRunsWithError and AfterJobRunsWithPanic listeners; a job
// with listeners of its own calls Failed(jobName) from them instead.
func (l *Locker) TrackFailures() gocron.JobOption {
	return gocron.WithEventListeners(
		gocron.AfterJobRunsWithError(func(_ uuid.UUID, jobName string, _ error) { l.Failed(jobName) }),
		gocron.AfterJobRunsWithPanic(func(_ uuid.UUID, jobName string, _ any) { l.Failed(jobName) }),
	)
}

// Failed marks the run of jobName holding its lock in this process as failed: its Unlock leaves the tick open.
func (l *Locker) Failed(jobName string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held := l.running[l.opts.LockName(jobName)]; held != nil {
		held.failed = true
	}
}

// Tick is the tick (the slot key) the run of jobName holding its lock in this process is for, or "" when none
// does. A job may hand it to what it writes, as the key that makes a retry of the tick idempotent.
func (l *Locker) Tick(jobName string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if held := l.running[l.opts.LockName(jobName)]; held != nil {
		return held.slot
	}
	return ""
}

// Lock takes the job's lock for the tick being run. It returns an error wrapping ErrHeld or ErrDone when another
// scheduler runs or ran the tick (gocron skips the run), one wrapping ErrRateLimited when this caller is over its
// quota (the run skipped, logged as a warning), and one wrapping ErrUnavailable when schedlock cannot be asked
// (fail-closed, logged as an error) unless Options.FailOpen.
func (l *Locker) Lock(ctx context.Context, jobName string) (gocron.Lock, error) {
	name := l.opts.LockName(jobName)
	slot := l.tick(jobName)
	acquired, err := l.opts.Client.Acquire(ctx, name, schedlock.AcquireRequest{
		AtMostFor: l.opts.AtMostFor, Holder: l.holder(), Slot: slot,
	})
	log := l.opts.Logger.With("job", jobName, "lock", name, "tick", slot)
	switch {
	case errors.Is(err, ErrHeld), errors.Is(err, ErrDone):
		log.Debug("schedlock: run skipped", "reason", err)
		return nil, err
	case errors.Is(err, ErrRateLimited):
		// No verdict on the lock and no outage: another scheduler, under its own quota, may run the tick.
		var api *APIError
		retryAfter := time.Duration(0)
		if errors.As(err, &api) {
			retryAfter = api.RetryAfter
		}
		log.Warn("schedlock: run skipped: over this caller's quota (429 rate_limited)", "retry_after", retryAfter)
		return nil, err
	case errors.Is(err, ErrUnavailable) && l.opts.FailOpen:
		log.Warn("schedlock: lock service unavailable; running WITHOUT a lock (FailOpen)", "error", err)
		return unlocked{}, nil
	case err != nil:
		log.Error("schedlock: run NOT started (fail-closed)", "error", err)
		return nil, err
	}
	held := &lease{locker: l, name: name, token: acquired.Token, lockUntil: acquired.LockUntil, slot: slot}
	l.mu.Lock()
	l.running[name] = held
	l.mu.Unlock()
	return held, nil
}

// tick is the scheduled time of the run gocron is locking, as the slot key ("2026-11-30T03:00:00.000Z"), or "" when
// it is not known. gocron reschedules a job only after Lock returns, so its next run is still the one starting.
func (l *Locker) tick(jobName string) string {
	l.mu.Lock()
	s := l.scheduler
	l.mu.Unlock()
	if s == nil {
		return ""
	}
	for _, job := range s.Jobs() {
		if job.Name() != jobName {
			continue
		}
		next, err := job.NextRun()
		if err != nil || next.IsZero() || next.After(time.Now().Add(earlyTolerance)) {
			return "" // not a scheduled tick that is due: RunNow, or a job removed meanwhile
		}
		return tickKey(next)
	}
	return ""
}

// tickKey is a tick as the slot key: the instant in UTC to the millisecond, written as the API writes times
// ("2026-11-30T03:00:00.000Z"). The server orders keys of this one form as times (docs/slots.md): a late trigger
// of an older tick is refused once a newer one completed.
func tickKey(at time.Time) string {
	return at.UTC().Format("2006-01-02T15:04:05.000Z")
}

// lease is a lock a run in this process holds.
type lease struct {
	locker    *Locker
	name      string
	token     string
	lockUntil time.Time
	slot      string
	failed    bool
}

// Unlock releases the lock, completing the tick unless the run failed (TrackFailures). It retries on network
// errors and 5xx, and after a 429's Retry-After (release is idempotent); a release that cannot be sent is logged,
// and the lock frees itself at lock_until.
func (h *lease) Unlock(ctx context.Context) error {
	l := h.locker
	l.mu.Lock()
	if l.running[h.name] == h {
		delete(l.running, h.name)
	}
	completed := !h.failed
	l.mu.Unlock()
	// The job's context ends with the scheduler; the release must still go out.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	_, err := l.opts.Client.ReleaseRetrying(ctx, h.name, h.token, completed, func(err error, wait time.Duration) {
		l.opts.Logger.Warn("schedlock: release failed, retrying", "lock", h.name, "in", wait, "error", err)
	})
	switch {
	case errors.Is(err, schedlock.ErrNotHolder):
		l.opts.Logger.Warn("schedlock: the lock expired and was taken over before the run ended", "lock", h.name)
		return nil
	case err != nil:
		l.opts.Logger.Warn("schedlock: could not release; the lock frees itself at lock_until", "lock", h.name,
			"lock_until", h.lockUntil, "error", err)
		return fmt.Errorf("schedlock: release %s: %w", h.name, err)
	}
	return nil
}

// unlocked is the Lock of a run that goes ahead without one (FailOpen).
type unlocked struct{}

func (unlocked) Unlock(context.Context) error { return nil }

// FromEnv is a Client for SCHEDLOCK_URL (default http://127.0.0.1:8000), SCHEDLOCK_TOKEN and SCHEDLOCK_TOKEN_FILE
// (a file holding the token, re-read at every request: a Kubernetes projected token, rotated, is picked up).
func FromEnv() *schedlock.Client { return schedlock.FromEnv() }

// holder is who the lock's locked_by names: Options.Holder, else "gocron on HOST pid PID".
func (l *Locker) holder() string {
	if l.opts.Holder != "" {
		return l.opts.Holder
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("gocron on %s pid %d", host, os.Getpid())
}
