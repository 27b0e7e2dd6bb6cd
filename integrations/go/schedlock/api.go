package schedlock

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// AcquireRequest is what an acquire asks for. A tick (docs/slots.md) is Slot, a key of the caller's own, or
// OncePer, a cron schedule (read in Timezone) whose latest tick by the database's clock the service computes.
type AcquireRequest struct {
	AtMostFor  time.Duration // lock_at_most_for: how long a dead holder blocks others
	AtLeastFor time.Duration // lock_at_least_for: the lock is kept at least this long after it was taken
	Holder     string        // recorded in locked_by; default "HOST pid PID"
	Slot       string
	OncePer    string
	Timezone   string
}

// Acquired is a lease: Token releases and extends it (a secret: never log it).
type Acquired struct {
	Name         string    `json:"name"`
	Token        string    `json:"token"`
	FencingToken int64     `json:"fencing_token"`
	LockedAt     time.Time `json:"locked_at"`
	LockUntil    time.Time `json:"lock_until"`
	LockedBy     string    `json:"locked_by"`
	DBTime       time.Time `json:"db_time"`
	Slot         *string   `json:"slot"`
}

func (a *Acquired) check() error { return required("token", a.Token) }

// Released is a release: the lock is free from LockUntil on.
type Released struct {
	Name      string    `json:"name"`
	LockUntil time.Time `json:"lock_until"`
	DBTime    time.Time `json:"db_time"`
	Slot      *string   `json:"slot"`
	Completed *bool     `json:"completed"`
}

func (r *Released) check() error { return required("name", r.Name) }

// Extended is an extension: the lease now runs until LockUntil.
type Extended struct {
	Name         string    `json:"name"`
	FencingToken int64     `json:"fencing_token"`
	LockedAt     time.Time `json:"locked_at"`
	LockUntil    time.Time `json:"lock_until"`
	DBTime       time.Time `json:"db_time"`
}

func (e *Extended) check() error { return required("name", e.Name) }

// Lock is one lock as the database has it; Held is judged by the database's clock at DBTime.
type Lock struct {
	Name              string     `json:"name"`
	LockedBy          string     `json:"locked_by"`
	LockedAt          time.Time  `json:"locked_at"`
	LockUntil         time.Time  `json:"lock_until"`
	Held              bool       `json:"held"`
	FencingToken      int64      `json:"fencing_token"`
	DBTime            time.Time  `json:"db_time"`
	LastCompletedSlot *string    `json:"last_completed_slot"`
	LastCompletedAt   *time.Time `json:"last_completed_at"`
}

func (l *Lock) check() error { return required("name", l.Name) }

// LockPage is one page of locks in name order; NextCursor is nil on the last.
type LockPage struct {
	Items      []Lock    `json:"items"`
	NextCursor *string   `json:"next_cursor"`
	DBTime     time.Time `json:"db_time"`
}

func (p *LockPage) check() error {
	if p.Items == nil {
		return errors.New("items: expected a list of objects")
	}
	for i := range p.Items {
		p.Items[i].DBTime = p.DBTime
	}
	return nil
}

// Run is one acquisition of a lock and how it ended (docs/history.md).
type Run struct {
	Name         string     `json:"name"`
	FencingToken int64      `json:"fencing_token"`
	LockedBy     string     `json:"locked_by"`
	TokenName    *string    `json:"token_name"`
	Source       string     `json:"source"`
	AcquiredAt   time.Time  `json:"acquired_at"`
	LockUntil    time.Time  `json:"lock_until"`
	EndedAt      *time.Time `json:"ended_at"`
	Outcome      string     `json:"outcome"`
	DurationMs   int64      `json:"duration_ms"`
	Skipped      int64      `json:"skipped"`
	ForcedBy     *string    `json:"forced_by"`
	ForceReason  *string    `json:"force_reason"`
}

// RunPage is one page of runs, newest first; NextCursor is nil on the last.
type RunPage struct {
	Items      []Run     `json:"items"`
	NextCursor *string   `json:"next_cursor"`
	DBTime     time.Time `json:"db_time"`
}

func (p *RunPage) check() error {
	if p.Items == nil {
		return errors.New("items: expected a list of objects")
	}
	return nil
}

// Tick is one tick of a job and its state.
type Tick struct {
	Tick  time.Time `json:"tick"`
	State string    `json:"state"`
}

// Job is a registered job and its state (docs/jobs.md): up, late, down, paused or new.
type Job struct {
	Name            string     `json:"name"`
	Schedule        string     `json:"schedule"`
	Timezone        string     `json:"timezone"`
	Grace           string     `json:"grace"`
	Paused          bool       `json:"paused"`
	State           string     `json:"state"`
	Recent          []Tick     `json:"recent"`
	LastTick        *Tick      `json:"last_tick"`
	NextTick        *time.Time `json:"next_tick"`
	LastCompletedAt *time.Time `json:"last_completed_at"`
}

// JobPage is one page of jobs by name; NextCursor is nil on the last.
type JobPage struct {
	Items      []Job     `json:"items"`
	NextCursor *string   `json:"next_cursor"`
	DBTime     time.Time `json:"db_time"`
}

func (p *JobPage) check() error {
	if p.Items == nil {
		return errors.New("items: expected a list of objects")
	}
	return nil
}

// ForceReleased is a force-release: Forced is false when the lock was not held (nothing changed).
type ForceReleased struct {
	Name      string    `json:"name"`
	Forced    bool      `json:"forced"`
	LockUntil time.Time `json:"lock_until"`
	DBTime    time.Time `json:"db_time"`
	Run       *Run      `json:"run"`
}

func (f *ForceReleased) check() error { return required("name", f.Name) }

// Acquire takes the lock now, or fails with an error matching ErrHeld (or ErrDone for a tick already completed);
// it never waits.
func (c *Client) Acquire(ctx context.Context, name string, r AcquireRequest) (*Acquired, error) {
	path, err := lockPath(name, "acquire", false)
	if err != nil {
		return nil, err
	}
	body := map[string]string{
		"lock_at_most_for":  FormatDuration(r.AtMostFor),
		"lock_at_least_for": FormatDuration(r.AtLeastFor),
	}
	for key, value := range map[string]string{"holder": r.Holder, "slot": r.Slot, "schedule": r.OncePer, "timezone": r.Timezone} {
		if value != "" {
			body[key] = value
		}
	}
	var answer Acquired
	if err := c.call(ctx, "POST", path, nil, body, "acquire "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// Release gives the lock back (idempotent). completed false (the job failed) leaves the lease's slot open.
func (c *Client) Release(ctx context.Context, name, token string, completed bool) (*Released, error) {
	path, err := lockPath(name, "release", false)
	if err != nil {
		return nil, err
	}
	body := map[string]any{"token": token}
	if !completed {
		body["completed"] = false // sent only when false: the service's default is true
	}
	var answer Released
	if err := c.call(ctx, "POST", path, nil, body, "release "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// ReleaseMaxRetryAfter bounds each wait of ReleaseRetrying after a 429: at most 3 x 10 s in all, never forever.
const ReleaseMaxRetryAfter = 10 * time.Second

// ReleaseRetrying is Release, retried after 0.2, 0.5 and 1 s while the service is unavailable: safe, since a
// release is idempotent. A release answered 429 rate_limited (the caller over its quota: no verdict on the lease)
// is retried as often, each time after the service's Retry-After (at least that delay, at most
// ReleaseMaxRetryAfter). retrying, when not nil, is told each failure and the wait before the next attempt.
func (c *Client) ReleaseRetrying(ctx context.Context, name, token string, completed bool, retrying func(error, time.Duration)) (*Released, error) {
	for _, delay := range []time.Duration{200 * time.Millisecond, 500 * time.Millisecond, time.Second} {
		released, err := c.Release(ctx, name, token, completed)
		switch {
		case errors.Is(err, ErrRateLimited):
			var api *APIError
			if errors.As(err, &api) {
				delay = min(max(api.RetryAfter, delay), ReleaseMaxRetryAfter)
			}
		case !errors.Is(err, ErrUnavailable):
			return released, err
		}
		if retrying != nil {
			retrying(err, delay)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(delay):
		}
	}
	return c.Release(ctx, name, token, completed)
}

// Extend moves lock_until to the database's now + atMostFor; ErrNotHolder once the lease is over.
func (c *Client) Extend(ctx context.Context, name, token string, atMostFor time.Duration) (*Extended, error) {
	path, err := lockPath(name, "extend", false)
	if err != nil {
		return nil, err
	}
	body := map[string]string{"token": token, "lock_at_most_for": FormatDuration(atMostFor)}
	var answer Extended
	if err := c.call(ctx, "POST", path, nil, body, "extend "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// Get is the lock as the database has it; ErrNotFound if it was never taken.
func (c *Client) Get(ctx context.Context, name string) (*Lock, error) {
	path, err := lockPath(name, "", true)
	if err != nil {
		return nil, err
	}
	var answer Lock
	if err := c.call(ctx, "GET", path, nil, nil, "get "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// ListOptions filter List: names starting with Prefix, only held (Held true) or free (false) locks.
type ListOptions struct {
	Prefix string
	Held   *bool
	Limit  int
	Cursor string
}

// List is one page of locks in name order.
func (c *Client) List(ctx context.Context, o ListOptions) (*LockPage, error) {
	query := url.Values{"limit": {strconv.Itoa(orDefault(o.Limit, 100))}}
	if o.Prefix != "" {
		query.Set("prefix", o.Prefix)
	}
	if o.Held != nil {
		query.Set("held", strconv.FormatBool(*o.Held))
	}
	if o.Cursor != "" {
		query.Set("cursor", o.Cursor)
	}
	var answer LockPage
	if err := c.call(ctx, "GET", "/v1/locks", query, nil, "list locks", &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// History is one page of the runs of name, newest first.
func (c *Client) History(ctx context.Context, name string, limit int, cursor string) (*RunPage, error) {
	path, err := lockPath(name, "runs", true)
	if err != nil {
		return nil, err
	}
	query := url.Values{"limit": {strconv.Itoa(orDefault(limit, 100))}}
	if cursor != "" {
		query.Set("cursor", cursor)
	}
	var answer RunPage
	if err := c.call(ctx, "GET", path, query, nil, "history of "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// JobsOptions filter Jobs: names starting with Prefix, jobs in State (up, late, down, paused, new).
type JobsOptions struct {
	Prefix string
	State  string
	Limit  int
	Cursor string
}

// Jobs is one page of the jobs the token may read, by name.
func (c *Client) Jobs(ctx context.Context, o JobsOptions) (*JobPage, error) {
	query := url.Values{"limit": {strconv.Itoa(orDefault(o.Limit, 100))}}
	for key, value := range map[string]string{"prefix": o.Prefix, "state": o.State, "cursor": o.Cursor} {
		if value != "" {
			query.Set(key, value)
		}
	}
	var answer JobPage
	if err := c.call(ctx, "GET", "/v1/jobs", query, nil, "list jobs", &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// ForceRelease frees name now, whoever holds it (an admin token); ErrNotFound for a name without a lock.
func (c *Client) ForceRelease(ctx context.Context, name, reason string) (*ForceReleased, error) {
	path, err := lockPath(name, "force-release", true)
	if err != nil {
		return nil, err
	}
	var answer ForceReleased
	body := map[string]string{"reason": reason}
	if err := c.call(ctx, "POST", path, nil, body, "force-release "+PyRepr(name), &answer); err != nil {
		return nil, err
	}
	return &answer, nil
}

// NameError is a lock name refused before any request: empty, or with a "/" where the API takes none.
type NameError struct{ Message string }

func (e *NameError) Error() string { return e.Message }

// lockPath is the lock's URL path. rowName: an operation on a row that exists (read, history, force-release), which
// takes any name a row can have, "/" included; acquire, extend and release take the API's names only. Every byte but
// letters, digits and "-_~" is percent-encoded, dots too: "." or ".." would otherwise be resolved away.
func lockPath(name, action string, rowName bool) (string, error) {
	if name == "" {
		return "", &NameError{"lock name: must be a non-empty string"}
	}
	if strings.Contains(name, "/") && !rowName {
		return "", &NameError{fmt.Sprintf("lock name: must not contain '/': %s", PyRepr(name))}
	}
	var escaped strings.Builder
	for i := 0; i < len(name); i++ {
		b := name[i]
		if 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '-' || b == '_' || b == '~' {
			escaped.WriteByte(b)
		} else {
			fmt.Fprintf(&escaped, "%%%02X", b)
		}
	}
	path := "/v1/locks/" + escaped.String()
	if action != "" {
		path += "/" + action
	}
	return path, nil
}

func required(field, value string) error {
	if value == "" {
		return fmt.Errorf("%s: expected str, got None", field)
	}
	return nil
}

func orDefault(value, fallback int) int {
	if value <= 0 {
		return fallback
	}
	return value
}

// PyRepr quotes text as Python's repr does for a str, which the Python client's messages use: 'name'.
func PyRepr(text string) string {
	quote := "'"
	if strings.Contains(text, "'") && !strings.Contains(text, `"`) {
		quote = `"`
	}
	var b strings.Builder
	b.WriteString(quote)
	for _, r := range text {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case string(r) == quote:
			b.WriteString(`\` + quote)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString(quote)
	return b.String()
}
