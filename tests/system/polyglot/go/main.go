// Command driver drives examples/go for tests/system/polyglot: each scenario prints one JSON object on stdout.
//
//	driver cycle NAME
//	driver execute NAME AT_MOST_MS AT_LEAST_MS ok|throw|panic
//	driver tick NAME ok|throw slot KEY  |  driver tick NAME ok|throw once-per CRON ZONE
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"example.com/schedlock"
)

func main() {
	ctx := context.Background()
	var result map[string]any
	var err error
	switch os.Args[1] {
	case "cycle":
		result, err = cycle(ctx, os.Args[2])
	case "execute":
		result = execute(ctx, os.Args[2], millis(os.Args[3]), millis(os.Args[4]), os.Args[5])
	case "tick":
		tick := schedlock.Tick{Slot: os.Args[5]}
		if os.Args[4] == "once-per" {
			tick = schedlock.Tick{OncePer: os.Args[5], Timezone: os.Args[6]}
		}
		result, err = runTick(ctx, os.Args[2], os.Args[3], tick)
	default:
		err = fmt.Errorf("unknown scenario %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if err := json.NewEncoder(os.Stdout).Encode(result); err != nil {
		panic(err)
	}
}

func cycle(ctx context.Context, name string) (map[string]any, error) {
	client := schedlock.FromEnv()
	lease, err := client.TryLock(ctx, name, 10*time.Minute, 0)
	if err != nil {
		return nil, err
	}
	firstUntil := lease.LockUntil()
	second := "acquired"
	_, err = client.TryLock(ctx, name, 10*time.Minute, 0)
	var held *schedlock.HeldError
	if errors.As(err, &held) {
		second = "held"
	} else if err != nil {
		return nil, err
	}
	if err := lease.Extend(ctx, 20*time.Minute); err != nil {
		return nil, err
	}
	extendedUntil := lease.LockUntil()
	if err := lease.Release(ctx); err != nil {
		return nil, err
	}
	row, err := client.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	locks, err := client.List(ctx, name)
	if err != nil {
		return nil, err
	}
	listed := []string{}
	for _, lock := range locks {
		listed = append(listed, lock.Name)
	}
	return map[string]any{
		"fencing_token": lease.FencingToken, "first_lock_until": stamp(firstUntil), "second": second,
		"extended": true, "extended_lock_until": stamp(extendedUntil),
		"get_held": row.Held, "get_fencing_token": row.FencingToken, "listed": listed,
	}, nil
}

func execute(ctx context.Context, name string, atMost, atLeast time.Duration, mode string) map[string]any {
	result := map[string]any{"fencing_token": nil}
	ran, err := run(ctx, name, atMost, atLeast, mode, result)
	var rejected *schedlock.APIError
	switch {
	case errors.As(err, &rejected):
		return map[string]any{"outcome": "rejected", "status": rejected.Status, "code": rejected.Code}
	case errors.Is(err, schedlock.ErrUnavailable):
		result["outcome"] = "skipped_unavailable"
	case ran && err != nil:
		result["outcome"] = "threw"
	case ran:
		result["outcome"] = "executed"
	case err == nil:
		result["outcome"] = "skipped_held"
	default:
		result["outcome"] = "error: " + err.Error()
	}
	_, outside := schedlock.AssertLocked(ctx)
	result["assert_outside"] = map[bool]string{true: "refused", false: "allowed"}[outside != nil]
	return result
}

// run is schedlock.Run with a job that records its fencing token; a panic in the job comes back as an error.
func run(ctx context.Context, name string, atMost, atLeast time.Duration, mode string, result map[string]any) (ran bool, err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			ran, err = true, fmt.Errorf("panic: %v", recovered)
		}
	}()
	return schedlock.Run(ctx, name, atMost, atLeast, func(ctx context.Context) error {
		lease, err := schedlock.AssertLocked(ctx)
		if err != nil {
			return err
		}
		result["fencing_token"] = lease.FencingToken
		switch mode {
		case "throw":
			return errors.New("the job failed")
		case "panic":
			panic("the job failed")
		}
		return nil
	})
}

// runTick runs a job once per tick: "executed", "threw" (the tick stays open) or "skipped" (done or held).
func runTick(ctx context.Context, name, mode string, tick schedlock.Tick) (map[string]any, error) {
	result := map[string]any{"slot": nil}
	ran, err := schedlock.RunTick(ctx, name, time.Minute, tick, func(ctx context.Context) error {
		lease, err := schedlock.AssertLocked(ctx)
		if err != nil {
			return err
		}
		result["slot"] = lease.Slot
		if mode == "throw" {
			return errors.New("the job failed")
		}
		return nil
	})
	switch {
	case ran && err != nil:
		result["outcome"] = "threw"
	case ran:
		result["outcome"] = "executed"
	case err == nil:
		result["outcome"] = "skipped_done" // or held: the test holds no lock of its own here
	default:
		return nil, err
	}
	return result, nil
}

func millis(text string) time.Duration {
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		panic(err)
	}
	return time.Duration(n) * time.Millisecond
}

// stamp formats as the API does (UTC, milliseconds, Z), so the test compares strings.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }
