package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/schedlock/schedlock/integrations/go/schedlock"
)

// runOptions is `schedlock run`, as given and as checked.
type runOptions struct {
	name, holder                           string
	atMostText, atLeastText, killAfterText string
	atMost, atLeast, killAfter             time.Duration
	keepAlive, failOpen, verbose           bool
	slot, oncePer, timezone                string
	slotGiven, oncePerGiven, timezoneGiven bool
	heldExitCode                           int
	command                                []string
}

// The API's names in messages, and the options of run that stand for them (in the Python CLI's order).
var optionNames = [][2]string{
	{"lock_at_most_for", "--at-most"},
	{"lock_at_least_for", "--at-least"},
	{"once_per_timezone", "--timezone"},
	{"once_per", "--once-per"},
	{"slot", "--slot"},
}

// checkRun checks what run's options say before any request, as the Python CLI does: a typo fails now, not at 3 a.m.
func checkRun(r *runOptions) string {
	message := ""
	var err error
	if r.atMost, err = schedlock.ParseDuration(r.atMostText, "lock_at_most_for"); err != nil {
		message = err.Error()
	} else if r.atLeast, err = schedlock.ParseDuration(r.atLeastText, "lock_at_least_for"); err != nil {
		message = err.Error()
	} else if r.atMost <= 0 {
		message = "lock_at_most_for: must be greater than zero"
	} else if r.atLeast > r.atMost {
		message = "lock_at_least_for: must not exceed lock_at_most_for"
	} else if minimum, _ := time.ParseDuration(minimumKeepAlive); r.keepAlive && r.atMost < minimum {
		message = fmt.Sprintf("keep-alive needs lock_at_most_for >= %ss (got %ss); it extends every lock_at_most_for / 2",
			formatG(minimum.Seconds()), formatG(r.atMost.Seconds()))
	} else if r.killAfter, err = schedlock.ParseDuration(r.killAfterText, "--kill-after"); err != nil {
		message = err.Error()
	} else if r.slotGiven && r.oncePerGiven {
		message = "slot and once_per: give one of them, not both"
	} else if r.timezoneGiven && !r.oncePerGiven {
		message = "once_per_timezone: only goes with once_per"
	} else if n := utf8.RuneCountInString(r.slot); r.slotGiven && (n < 1 || n > 64) {
		message = "slot: must be 1 to 64 characters"
	}
	if message != "" {
		for _, names := range optionNames {
			message = strings.ReplaceAll(message, names[0], names[1])
		}
		return message
	}
	if r.heldExitCode < 0 || r.heldExitCode > 255 {
		return "--held-exit-code: must be between 0 and 255"
	}
	return ""
}

// formatG formats seconds as Python's "{:g}" does for the values run's messages show.
func formatG(value float64) string { return strconv.FormatFloat(value, 'g', 6, 64) }

// signals records SIGINT, SIGTERM and SIGHUP and forwards them to the command's process group while it runs.
type signals struct {
	mu       sync.Mutex
	received syscall.Signal
	child    int // the command's pid (and process group), 0 while none runs
	incoming chan os.Signal
}

func catchSignals() *signals {
	s := &signals{incoming: make(chan os.Signal, 8)}
	signal.Notify(s.incoming, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		for got := range s.incoming {
			number := got.(syscall.Signal)
			s.mu.Lock()
			s.received = number
			child := s.child
			s.mu.Unlock()
			if child != 0 {
				_ = syscall.Kill(-child, number)
			}
		}
	}()
	return s
}

func (s *signals) got() syscall.Signal {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received
}

func (s *signals) send(number syscall.Signal) {
	s.mu.Lock()
	child := s.child
	s.mu.Unlock()
	if child != 0 {
		_ = syscall.Kill(-child, number) // ESRCH: the group is gone already
	}
}

// run acquires, runs COMMAND under the lock, releases; it returns the exit code.
func run(ctx context.Context, client *schedlock.Client, r runOptions) int {
	commandName := filepath.Base(r.command[0])
	sigs := catchSignals()
	holder := r.holder
	if holder == "" {
		host, _ := os.Hostname()
		holder = cleanHolder(fmt.Sprintf("%s on %s pid %d", commandName, host, os.Getpid()))
	}
	request := schedlock.AcquireRequest{AtMostFor: r.atMost, AtLeastFor: r.atLeast, Holder: holder}
	if r.slot != "" || r.oncePer != "" || r.timezone != "" {
		request.Slot, request.OncePer, request.Timezone = r.slot, r.oncePer, r.timezone
	}
	started := time.Now()
	lease, err := client.Acquire(ctx, r.name, request)
	var api *schedlock.APIError
	var badName *schedlock.NameError
	switch {
	case errors.Is(err, schedlock.ErrHeld):
		if r.verbose {
			errors.As(err, &api)
			until := "?"
			if at, ok := detailTime(api, "lock_until"); ok {
				until = schedlock.FormatTime(at)
			}
			say(fmt.Sprintf("%s is held by %s until %s; not running %s", pyRepr(r.name), detailOrNone(api, "locked_by"), until, commandName))
		}
		return r.heldExitCode
	case errors.Is(err, schedlock.ErrDone):
		if r.verbose {
			errors.As(err, &api)
			at := "?"
			if when, ok := detailTime(api, "completed_at"); ok {
				at = schedlock.FormatTime(when)
			}
			if stale, _ := api.Details["stale"].(bool); stale { // a late trigger of a tick older than the last completed
				last := api.Detail("last_completed_slot")
				if last == "" {
					last = detailOrNone(api, "slot")
				}
				say(fmt.Sprintf("slot %s of %s is stale: older than its last completed slot %s (completed at %s); not running %s",
					detailOrNone(api, "slot"), pyRepr(r.name), last, at, commandName))
			} else {
				say(fmt.Sprintf("slot %s of %s was completed at %s; not running %s", detailOrNone(api, "slot"), pyRepr(r.name), at, commandName))
			}
		}
		return r.heldExitCode
	case errors.Is(err, schedlock.ErrUnavailable):
		say(fmt.Sprintf("lock service unavailable, so %s could not be taken: %v", pyRepr(r.name), err))
		if !r.failOpen {
			return exitUnavailable
		}
		say(fmt.Sprintf("--fail-open: running %s WITHOUT the lock", commandName))
		return supervise(r, os.Environ(), sigs, nil)
	case errors.As(err, &badName):
		say(badName.Message)
		return exitUsage
	case err != nil:
		say("the lock service rejected the request: " + err.Error())
		return exitRejected
	}

	keeper := startKeepAlive(ctx, client, r, lease, started)
	code := 0
	if got := sigs.got(); got != 0 { // stopped while acquiring: do not start the command
		code = 128 + int(got)
	} else {
		env := withEnv(os.Environ(), "SCHEDLOCK_LOCK_NAME", lease.Name)
		env = withEnv(env, "SCHEDLOCK_FENCING_TOKEN", strconv.FormatInt(lease.FencingToken, 10))
		if lease.Slot != nil {
			env = withEnv(env, "SCHEDLOCK_SLOT", *lease.Slot)
		}
		code = supervise(r, env, sigs, keeper)
	}
	keeper.stop()
	// A command that failed did not complete its tick: the release leaves it open for another run.
	_, err = client.ReleaseRetrying(context.WithoutCancel(ctx), lease.Name, lease.Token, code == 0, func(err error, delay time.Duration) {
		warn(fmt.Sprintf("release of %s failed, retrying in %ss: %v", pyRepr(r.name), formatG(delay.Seconds()), err))
	})
	switch {
	case errors.Is(err, schedlock.ErrNotHolder):
		keeper.lose("release refused: it expired and was taken over before the job finished")
	case err != nil:
		warn(fmt.Sprintf("could not release lock %s; it frees itself at its lock_until: %v", pyRepr(r.name), err))
	}
	return code
}

// supervise runs COMMAND in its own process group with env, forwarding signals; under keep-alive a lost lock
// terminates it (SIGTERM, then SIGKILL after --kill-after) and the exit code is 75.
func supervise(r runOptions, env []string, sigs *signals, keeper *keeper) int {
	command := exec.Command(r.command[0], r.command[1:]...)
	command.Env = env
	command.Stdin, command.Stdout, command.Stderr = os.Stdin, os.Stdout, os.Stderr
	command.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := command.Start(); err != nil {
		var errno syscall.Errno
		switch {
		case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
			say("command not found: " + r.command[0])
			return exitNotFoundCmd
		case errors.As(err, &errno):
			say(fmt.Sprintf("cannot execute %s: %s", r.command[0], strerror(errno)))
		default:
			say(fmt.Sprintf("cannot execute %s: %v", r.command[0], err))
		}
		return exitCannotExecute
	}
	sigs.mu.Lock()
	sigs.child = command.Process.Pid
	received := sigs.received
	sigs.mu.Unlock()
	if received != 0 { // arrived between the last check and now: pass it on
		sigs.send(received)
	}
	done := make(chan error, 1)
	go func() { done <- command.Wait() }()
	var lost <-chan struct{}
	if keeper != nil {
		lost = keeper.lostCh
	}
	var kill <-chan time.Time
	terminating := false
	var waitErr error
loop:
	for {
		select {
		case waitErr = <-done:
			break loop
		case <-lost:
			lost = nil
			terminating = true
			say(fmt.Sprintf("lost the lock %s; terminating the command (SIGTERM, then SIGKILL after %ss)", pyRepr(r.name), formatG(r.killAfter.Seconds())))
			sigs.send(syscall.SIGTERM)
			kill = time.After(r.killAfter)
		case <-kill:
			kill = nil
			sigs.send(syscall.SIGKILL)
		}
	}
	sigs.mu.Lock()
	sigs.child = 0
	sigs.mu.Unlock()
	if terminating { // the loss is what ended the command
		return exitLockLost
	}
	var exit *exec.ExitError
	if errors.As(waitErr, &exit) {
		if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
			return 128 + int(status.Signal())
		}
		return exit.ExitCode()
	}
	if waitErr != nil {
		say(fmt.Sprintf("cannot execute %s: %v", r.command[0], waitErr))
		return exitCannotExecute
	}
	return exitOK
}

// keeper extends the lease every at-most/2 (ShedLock's KeepAliveLockProvider) and reports its loss on lostCh.
type keeper struct {
	name     string
	stopCh   chan struct{}
	finished chan struct{}
	lostCh   chan struct{}
	lostOnce sync.Once
	lostMu   sync.Mutex
	isLost   bool
}

func startKeepAlive(ctx context.Context, client *schedlock.Client, r runOptions, lease *schedlock.Acquired, started time.Time) *keeper {
	k := &keeper{name: r.name, stopCh: make(chan struct{}), finished: make(chan struct{}), lostCh: make(chan struct{})}
	if !r.keepAlive {
		close(k.finished)
		return k
	}
	go func() {
		defer close(k.finished)
		period := r.atMost
		deadline := started.Add(period) // counted from the start of the last good request: never after lock_until
		next := started.Add(period / 2)
		for {
			select {
			case <-k.stopCh:
				return
			case <-time.After(time.Until(next)):
			}
			sent := time.Now()
			_, err := client.Extend(ctx, lease.Name, lease.Token, r.atMost)
			switch {
			case err == nil:
				deadline, next = sent.Add(period), sent.Add(period/2)
			case errors.Is(err, schedlock.ErrUnavailable), errors.Is(err, schedlock.ErrRateLimited):
				// No verdict on the lease (a 429 neither): retry while it surely lives, after Retry-After if sent.
				pause := min(5*time.Second, period/10)
				var api *schedlock.APIError
				if errors.As(err, &api) && api.RetryAfter > 0 {
					pause = api.RetryAfter
				}
				retry := time.Now().Add(pause)
				if !retry.Before(deadline) {
					k.lose("could not be extended before it ran out")
					return
				}
				warn(fmt.Sprintf("could not extend lock %s, retrying: %v", pyRepr(r.name), err))
				next = retry
			default:
				k.lose(fmt.Sprintf("extension refused (%v)", err))
				return
			}
		}
	}()
	return k
}

// lose marks the lease lost, once: said on stderr, and the supervisor told.
func (k *keeper) lose(why string) {
	k.lostOnce.Do(func() {
		k.lostMu.Lock()
		k.isLost = true
		k.lostMu.Unlock()
		errorLog(fmt.Sprintf("lock %s lost: %s; another holder may be running the same job now", pyRepr(k.name), why))
		close(k.lostCh)
	})
}

func (k *keeper) stop() {
	select {
	case <-k.stopCh:
	default:
		close(k.stopCh)
	}
	<-k.finished
}

// warn and errorLog are the Python client's logger lines (WARNING and ERROR are always shown).
func warn(message string)     { say(message) }
func errorLog(message string) { say(message) }

func withEnv(env []string, key, value string) []string {
	out := env[:0:0]
	for _, entry := range env {
		if !strings.HasPrefix(entry, key+"=") {
			out = append(out, entry)
		}
	}
	return append(out, key+"="+value)
}

// cleanHolder fits free text into the service's holder field: no control characters, at most 128 characters.
func cleanHolder(text string) string {
	cleaned := strings.TrimSpace(strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return ' '
	}, text))
	if cleaned == "" {
		cleaned = "anonymous"
	}
	if utf8.RuneCountInString(cleaned) <= 128 {
		return cleaned
	}
	return string([]rune(cleaned)[:127]) + "…"
}

// strerror is the C library's message for errno, as Python's OSError.strerror gives it: capitalised.
func strerror(errno syscall.Errno) string {
	text := errno.Error()
	if text == "" {
		return text
	}
	return strings.ToUpper(text[:1]) + text[1:]
}

func detailOrNone(api *schedlock.APIError, key string) string {
	if api == nil {
		return "None"
	}
	if value := api.Detail(key); value != "" {
		return value
	}
	return "None"
}

func detailTime(api *schedlock.APIError, key string) (time.Time, bool) {
	if api == nil {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, api.Detail(key))
	return at, err == nil
}

func pyRepr(text string) string { return schedlock.PyRepr(text) }
