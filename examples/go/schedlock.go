// Package schedlock takes ShedLock-style locks from a schedlock service, with the standard library only.
//
// Copy this file into your module. A job that must run on one node at a time:
//
//	ran, err := schedlock.Run(ctx, "nightly-report", 14*time.Minute, 5*time.Minute, sendReport)
//
// Run skips the job, never waits, when another holder has the lock (ran == false, err == nil). When the service
// cannot be asked, the job is not run either and err wraps ErrUnavailable (fail-closed: nobody runs while the
// lock's state is unknown). A request the service rejects (bad name or duration, missing or wrong token) is an
// *APIError, never mistaken for "held". The URL and the API token come from SCHEDLOCK_URL and SCHEDLOCK_TOKEN.
//
// Once per tick (docs/slots.md): RunTick with Tick{OncePer: "0 3 * * *", Timezone: "Europe/Berlin"} (or a key of
// your own, Tick{Slot: "2026-11-30"}) runs the job at most once per tick of the schedule, by the database's clock:
// a tick already done is skipped like a held lock, and a job that fails leaves its tick open for another node.
package schedlock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	// ErrHeld: another holder has the lock (errors.As gives the *HeldError, with who holds it until when).
	ErrHeld = errors.New("schedlock: lock held")
	// ErrDone: the tick asked for was already completed (errors.As gives the *DoneError, with when and by whom).
	ErrDone = errors.New("schedlock: tick already done")
	// ErrLost: the lease expired and may have been taken over; extending it is refused.
	ErrLost = errors.New("schedlock: lease lost")
	// ErrNotFound: no lock of that name exists.
	ErrNotFound = errors.New("schedlock: no such lock")
	// ErrUnavailable: the service could not be asked or did not answer; the lock's state is unknown.
	ErrUnavailable = errors.New("schedlock: lock service unavailable")
	// ErrNotLocked: AssertLocked outside a job run by Run, or after its lease has expired.
	ErrNotLocked = errors.New("schedlock: not running under a live lock")
)

// HeldError says who holds the lock; errors.Is(err, ErrHeld) is true for it.
type HeldError struct {
	Name      string
	LockedBy  string
	LockUntil time.Time
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("schedlock: %s is held by %s until %s", e.Name, e.LockedBy, e.LockUntil.Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrHeld) true.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// DoneError says which tick was completed, when and by whom; errors.Is(err, ErrDone) is true for it.
type DoneError struct {
	Name        string
	Slot        string
	CompletedAt time.Time
	LockedBy    string
}

func (e *DoneError) Error() string {
	return fmt.Sprintf("schedlock: tick %s of %s was completed at %s by %s", e.Slot, e.Name,
		e.CompletedAt.Format(time.RFC3339), e.LockedBy)
}

// Is makes errors.Is(err, ErrDone) true.
func (e *DoneError) Is(target error) bool { return target == ErrDone }

// Tick asks for a run once per tick: OncePer is a cron schedule (read in Timezone, default UTC) whose latest tick
// the service computes on the database's clock; Slot is a tick key of your own instead. The zero Tick asks for none.
type Tick struct {
	OncePer  string
	Timezone string
	Slot     string
}

// APIError is a request the service rejected: 422 invalid_request, 401 unauthorized, 403 forbidden, ...
type APIError struct {
	Status  int
	Code    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("schedlock: %d %s: %s", e.Status, e.Code, e.Message)
}

// Client talks to one schedlock service. The zero value is usable: defaults are filled in per request.
type Client struct {
	BaseURL string        // default SCHEDLOCK_URL, else http://127.0.0.1:8000
	Token   string        // API token, sent as a bearer token when not empty
	HTTP    *http.Client  // default http.DefaultClient, as it comes
	Timeout time.Duration // per request; default 10s
	Holder  string        // recorded in locked_by; default "go on HOST pid PID"
}

// FromEnv returns a client for SCHEDLOCK_URL with the token SCHEDLOCK_TOKEN.
func FromEnv() *Client {
	return &Client{BaseURL: os.Getenv("SCHEDLOCK_URL"), Token: os.Getenv("SCHEDLOCK_TOKEN")}
}

// Lease is a lock this process holds. Release it when the job is done. Extend and Release may be called from
// another goroutine than the job's (a keep-alive loop, say).
type Lease struct {
	Name         string
	FencingToken int64 // strictly increases with every acquisition of Name: hand it to what the job writes
	LockedAt     time.Time
	LockedBy     string
	Slot         string // the tick this lease runs; empty without one

	client    *Client
	token     string
	mu        sync.Mutex
	lockUntil time.Time // the database's clock
	deadline  time.Time // lockUntil on this machine's monotonic clock: immune to clock skew
}

// Lock is a lock's row as GET /v1/locks/{name} and the listing show it.
type Lock struct {
	Name         string    `json:"name"`
	LockedBy     string    `json:"locked_by"`
	LockedAt     time.Time `json:"locked_at"`
	LockUntil    time.Time `json:"lock_until"`
	Held         bool      `json:"held"`
	FencingToken int64     `json:"fencing_token"`
	// The last tick a holder completed, and when (empty and nil while there is none).
	LastCompletedSlot string     `json:"last_completed_slot"`
	LastCompletedAt   *time.Time `json:"last_completed_at"`
}

// TryLock takes the lock with FromEnv's client. See Client.TryLock.
func TryLock(ctx context.Context, name string, atMost, atLeast time.Duration) (*Lease, error) {
	return FromEnv().TryLock(ctx, name, atMost, atLeast)
}

// Run runs job under the lock with FromEnv's client. See Client.Run.
func Run(ctx context.Context, name string, atMost, atLeast time.Duration, job func(context.Context) error) (bool, error) {
	return FromEnv().Run(ctx, name, atMost, atLeast, job)
}

// RunTick runs job at most once per tick, with FromEnv's client. See Client.RunTick.
func RunTick(ctx context.Context, name string, atMost time.Duration, tick Tick, job func(context.Context) error) (bool, error) {
	return FromEnv().RunTick(ctx, name, atMost, 0, tick, job)
}

// TryLock takes the lock, or returns a *HeldError (errors.Is(err, ErrHeld)) at once when another holder has it.
// atMost bounds how long a crashed holder blocks others; the lock is kept at least atLeast after it is taken.
func (c *Client) TryLock(ctx context.Context, name string, atMost, atLeast time.Duration) (*Lease, error) {
	return c.TryLockTick(ctx, name, atMost, atLeast, Tick{})
}

// TryLockTick is TryLock for a tick: it also returns a *DoneError (errors.Is(err, ErrDone)) when the tick was
// already completed, held or not.
func (c *Client) TryLockTick(ctx context.Context, name string, atMost, atLeast time.Duration, tick Tick) (*Lease, error) {
	var body struct {
		Token        string    `json:"token"`
		FencingToken int64     `json:"fencing_token"`
		LockedAt     time.Time `json:"locked_at"`
		LockUntil    time.Time `json:"lock_until"`
		LockedBy     string    `json:"locked_by"`
		DBTime       time.Time `json:"db_time"`
		Slot         string    `json:"slot"`
	}
	sent := time.Now()
	request := map[string]string{
		"lock_at_most_for": millis(atMost), "lock_at_least_for": millis(atLeast), "holder": c.holder(),
	}
	for key, value := range map[string]string{"schedule": tick.OncePer, "timezone": tick.Timezone, "slot": tick.Slot} {
		if value != "" {
			request[key] = value
		}
	}
	err := c.call(ctx, http.MethodPost, lockPath(name)+"/acquire", request, &body)
	var held *HeldError
	if errors.As(err, &held) {
		held.Name = name
	}
	var done *DoneError
	if errors.As(err, &done) {
		done.Name = name
	}
	if err != nil {
		return nil, err
	}
	return &Lease{
		Name: name, FencingToken: body.FencingToken, LockedAt: body.LockedAt, LockedBy: body.LockedBy, Slot: body.Slot,
		client: c, token: body.Token, lockUntil: body.LockUntil, deadline: sent.Add(body.LockUntil.Sub(body.DBTime)),
	}, nil
}

// Run takes the lock and runs job under it, then releases it (also when job fails or panics; the lock is kept
// until LockedAt + atLeast). When the lock is held, job does not run: (false, nil). When the service is
// unavailable, job does not run and the error wraps ErrUnavailable. Inside job, AssertLocked(ctx) finds the lease.
func (c *Client) Run(ctx context.Context, name string, atMost, atLeast time.Duration, job func(context.Context) error) (bool, error) {
	return c.RunTick(ctx, name, atMost, atLeast, Tick{}, job)
}

// RunTick is Run for a tick: job does not run when the tick was already completed either ((false, nil), logged),
// and a job that returns an error or panics leaves its tick open for another run.
func (c *Client) RunTick(ctx context.Context, name string, atMost, atLeast time.Duration, tick Tick, job func(context.Context) error) (bool, error) {
	lease, err := c.TryLockTick(ctx, name, atMost, atLeast, tick)
	if errors.Is(err, ErrDone) {
		log.Print(err)
		return false, nil
	}
	if errors.Is(err, ErrHeld) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	completed := false
	defer func() {
		// A fresh context: ctx may be cancelled by now, and the release should still be sent.
		releaseCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := lease.release(releaseCtx, completed); err != nil {
			log.Printf("schedlock: could not release %s; it frees itself at %s: %v", name, lease.LockUntil(), err)
		}
	}()
	err = job(context.WithValue(ctx, leaseKey{}, lease))
	completed = err == nil
	return true, err
}

// Extend moves LockUntil to the database's now + atMost. ErrLost when the lease expired (even if nobody took it).
func (l *Lease) Extend(ctx context.Context, atMost time.Duration) error {
	var body struct {
		LockUntil time.Time `json:"lock_until"`
		DBTime    time.Time `json:"db_time"`
	}
	sent := time.Now()
	err := l.client.call(ctx, http.MethodPost, lockPath(l.Name)+"/extend",
		map[string]string{"token": l.token, "lock_at_most_for": millis(atMost)}, &body)
	var rejected *APIError
	if errors.As(err, &rejected) && (rejected.Code == "not_holder" || rejected.Code == "lock_not_found") {
		l.set(l.LockUntil(), sent)
		return fmt.Errorf("%w: %s", ErrLost, rejected.Message)
	}
	if err != nil {
		return err
	}
	l.set(body.LockUntil, sent.Add(body.LockUntil.Sub(body.DBTime)))
	return nil
}

// LockUntil is when the lock frees itself unless extended (the database's clock).
func (l *Lease) LockUntil() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lockUntil
}

func (l *Lease) set(lockUntil, deadline time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lockUntil, l.deadline = lockUntil, deadline
}

func (l *Lease) live() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return time.Now().Before(l.deadline)
}

// Release gives the lock back; the service keeps it until LockedAt + atLeast. Release is idempotent on the
// service, so a failed attempt is retried (three attempts in about a second). A lease with a Slot completes it.
func (l *Lease) Release(ctx context.Context) error { return l.release(ctx, true) }

// ReleaseFailed is Release for a job that failed: the lease's Slot stays open for another run.
func (l *Lease) ReleaseFailed(ctx context.Context) error { return l.release(ctx, false) }

func (l *Lease) release(ctx context.Context, completed bool) error {
	request := map[string]any{"token": l.token, "completed": completed}
	var err error
	for attempt := 1; attempt <= 3; attempt++ {
		err = l.client.call(ctx, http.MethodPost, lockPath(l.Name)+"/release", request, nil)
		var rejected *APIError
		if errors.As(err, &rejected) && rejected.Code == "not_holder" {
			err = nil // taken over after it expired: nothing left to release
		}
		if !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt) * 200 * time.Millisecond)
	}
	l.set(l.LockUntil(), time.Time{})
	return err
}

// AssertLocked returns the lease of the job Run is running, as ShedLock's LockAssert.assertLocked() checks for
// one: ErrNotLocked outside such a job, or once its lease has expired by this machine's monotonic clock.
func AssertLocked(ctx context.Context) (*Lease, error) {
	lease, ok := ctx.Value(leaseKey{}).(*Lease)
	if !ok || !lease.live() {
		return nil, ErrNotLocked
	}
	return lease, nil
}

// Get returns the lock's row, or ErrNotFound.
func (c *Client) Get(ctx context.Context, name string) (*Lock, error) {
	var lock Lock
	err := c.call(ctx, http.MethodGet, lockPath(name), nil, &lock)
	var rejected *APIError
	if errors.As(err, &rejected) && rejected.Code == "lock_not_found" {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	return &lock, nil
}

// List returns every lock whose name starts with prefix, in name order, following the pages.
func (c *Client) List(ctx context.Context, prefix string) ([]Lock, error) {
	var locks []Lock
	query := url.Values{"prefix": {prefix}}
	for {
		var page struct {
			Items      []Lock  `json:"items"`
			NextCursor *string `json:"next_cursor"`
		}
		if err := c.call(ctx, http.MethodGet, "/v1/locks?"+query.Encode(), nil, &page); err != nil {
			return nil, err
		}
		locks = append(locks, page.Items...)
		if page.NextCursor == nil {
			return locks, nil
		}
		query.Set("cursor", *page.NextCursor)
	}
}

type leaseKey struct{}

// call sends one request and decodes a 200 answer into out. Errors: *HeldError, *APIError, or one wrapping
// ErrUnavailable (unreachable, timed out, a 5xx, or an answer that is not the service's JSON).
func (c *Client) call(ctx context.Context, method, path string, in, out any) error {
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		encoded, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(encoded)
	}
	request, err := http.NewRequestWithContext(ctx, method, c.baseURL()+path, body)
	if err != nil {
		return err
	}
	request.Header.Set("Accept", "application/json")
	if in != nil {
		request.Header.Set("Content-Type", "application/json")
	}
	if c.Token != "" {
		request.Header.Set("Authorization", "Bearer "+c.Token)
	}
	httpClient := c.HTTP
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	response, err := httpClient.Do(request)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer response.Body.Close()
	data, err := io.ReadAll(io.LimitReader(response.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%w: reading the answer: %v", ErrUnavailable, err)
	}
	var failure struct {
		Error *struct {
			Code        string    `json:"code"`
			Message     string    `json:"message"`
			LockedBy    string    `json:"locked_by"`
			LockUntil   time.Time `json:"lock_until"`
			Slot        string    `json:"slot"`
			CompletedAt time.Time `json:"completed_at"`
		} `json:"error"`
	}
	if response.StatusCode == http.StatusOK {
		if out == nil {
			return nil
		}
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%w: not the service's JSON: %v", ErrUnavailable, err)
		}
		return nil
	}
	if response.StatusCode >= 500 || json.Unmarshal(data, &failure) != nil || failure.Error == nil {
		return fmt.Errorf("%w: HTTP %d: %.200s", ErrUnavailable, response.StatusCode, data)
	}
	if failure.Error.Code == "lock_held" {
		return &HeldError{LockedBy: failure.Error.LockedBy, LockUntil: failure.Error.LockUntil}
	}
	if failure.Error.Code == "slot_done" {
		return &DoneError{Slot: failure.Error.Slot, CompletedAt: failure.Error.CompletedAt, LockedBy: failure.Error.LockedBy}
	}
	return &APIError{Status: response.StatusCode, Code: failure.Error.Code, Message: failure.Error.Message}
}

func (c *Client) baseURL() string {
	base := c.BaseURL
	if base == "" {
		base = "http://127.0.0.1:8000"
	}
	return strings.TrimRight(base, "/")
}

func (c *Client) holder() string {
	if c.Holder != "" {
		return c.Holder
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("go on %s pid %d", host, os.Getpid())
}

func lockPath(name string) string { return "/v1/locks/" + url.PathEscape(name) }

// millis is a duration in ShedLock's short form, which the service reads: 90s -> "90000ms".
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }
