package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/schedlock/schedlock/integrations/go/schedlock"
)

// The JSON shapes are the Python CLI's (docs/cli.md), key for key and in the same order.

type lockJSON struct {
	Name              string  `json:"name"`
	LockedBy          string  `json:"locked_by"`
	LockedAt          string  `json:"locked_at"`
	LockUntil         string  `json:"lock_until"`
	Held              bool    `json:"held"`
	FencingToken      int64   `json:"fencing_token"`
	LastCompletedSlot *string `json:"last_completed_slot,omitempty"`
	LastCompletedAt   *string `json:"last_completed_at,omitempty"`
	DBTime            *string `json:"db_time,omitempty"`
}

type runJSON struct {
	Name         string  `json:"name"`
	FencingToken int64   `json:"fencing_token"`
	LockedBy     string  `json:"locked_by"`
	TokenName    *string `json:"token_name"`
	Source       string  `json:"source"`
	AcquiredAt   string  `json:"acquired_at"`
	LockUntil    string  `json:"lock_until"`
	EndedAt      *string `json:"ended_at"`
	Outcome      string  `json:"outcome"`
	DurationMs   int64   `json:"duration_ms"`
	Skipped      int64   `json:"skipped"`
	ForcedBy     *string `json:"forced_by"`
	ForceReason  *string `json:"force_reason"`
}

type jobJSON struct {
	Name            string   `json:"name"`
	Schedule        string   `json:"schedule"`
	Timezone        string   `json:"timezone"`
	Grace           string   `json:"grace"`
	Paused          bool     `json:"paused"`
	State           string   `json:"state"`
	Recent          []string `json:"recent"`
	LastTick        *string  `json:"last_tick"`
	NextTick        *string  `json:"next_tick"`
	LastCompletedAt *string  `json:"last_completed_at"`
}

type items[T any] struct {
	Items []T `json:"items"`
}

func toLockJSON(lock schedlock.Lock) lockJSON {
	out := lockJSON{Name: lock.Name, LockedBy: lock.LockedBy, LockedAt: schedlock.FormatTime(lock.LockedAt),
		LockUntil: schedlock.FormatTime(lock.LockUntil), Held: lock.Held, FencingToken: lock.FencingToken}
	if lock.LastCompletedSlot != nil && lock.LastCompletedAt != nil { // the last completed slot, for names that have one
		out.LastCompletedSlot, out.LastCompletedAt = lock.LastCompletedSlot, timeOrNil(lock.LastCompletedAt)
	}
	return out
}

func toRunJSON(run schedlock.Run) runJSON {
	return runJSON{Name: run.Name, FencingToken: run.FencingToken, LockedBy: run.LockedBy, TokenName: run.TokenName,
		Source: run.Source, AcquiredAt: schedlock.FormatTime(run.AcquiredAt), LockUntil: schedlock.FormatTime(run.LockUntil),
		EndedAt: timeOrNil(run.EndedAt), Outcome: run.Outcome, DurationMs: run.DurationMs, Skipped: run.Skipped,
		ForcedBy: run.ForcedBy, ForceReason: run.ForceReason}
}

func timeOrNil(t *time.Time) *string {
	if t == nil || t.IsZero() {
		return nil
	}
	text := schedlock.FormatTime(*t)
	return &text
}

// printJSON prints value as Python's json.dumps(value, indent=2) does: non-ASCII escaped as \uXXXX, no HTML escapes.
func printJSON(value any) {
	var buffer bytes.Buffer
	encoder := json.NewEncoder(&buffer)
	encoder.SetEscapeHTML(false)
	encoder.SetIndent("", "  ")
	if err := encoder.Encode(value); err != nil {
		panic(err)
	}
	var out strings.Builder
	for _, r := range buffer.String() {
		switch {
		case r < 0x80:
			out.WriteRune(r)
		case r > 0xFFFF:
			r -= 0x10000
			fmt.Fprintf(&out, `\u%04x\u%04x`, 0xD800+(r>>10), 0xDC00+(r&0x3FF))
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	fmt.Print(out.String())
}

// printTable prints columns padded to their widest cell (in characters); the last one left ragged.
func printTable(rows [][]string) {
	widths := make([]int, len(rows[0])-1)
	for _, row := range rows {
		for i := range widths {
			widths[i] = max(widths[i], utf8.RuneCountInString(row[i]))
		}
	}
	var out strings.Builder
	for _, row := range rows {
		for i, width := range widths {
			if i > 0 {
				out.WriteString("  ")
			}
			out.WriteString(row[i] + strings.Repeat(" ", width-utf8.RuneCountInString(row[i])))
		}
		out.WriteString("  " + row[len(row)-1] + "\n")
	}
	fmt.Print(out.String())
}

func list(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	var locks []schedlock.Lock
	pageSize := 1000
	if args.limit > 0 {
		pageSize = min(args.limit, 1000)
	}
	cursor := ""
	for {
		page, err := client.List(ctx, schedlock.ListOptions{Prefix: args.prefix, Held: args.held, Limit: pageSize, Cursor: cursor})
		if err != nil {
			return 0, err
		}
		full := false
		for _, lock := range page.Items {
			locks = append(locks, lock)
			if args.limit > 0 && len(locks) >= args.limit {
				full = true
				break
			}
		}
		if full || page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if args.json {
		out := items[lockJSON]{Items: []lockJSON{}}
		for _, lock := range locks {
			out.Items = append(out.Items, toLockJSON(lock))
		}
		printJSON(out)
		return exitOK, nil
	}
	rows := [][]string{{"NAME", "HELD", "LOCK UNTIL", "FENCING", "LOCKED BY"}}
	for _, lock := range locks {
		rows = append(rows, []string{lock.Name, yesNo(lock.Held), schedlock.FormatTime(lock.LockUntil),
			strconv.FormatInt(lock.FencingToken, 10), lock.LockedBy})
	}
	printTable(rows)
	return exitOK, nil
}

func status(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	lock, err := client.Get(ctx, args.name)
	if err != nil {
		return 0, err
	}
	if args.json {
		out := toLockJSON(*lock)
		dbTime := schedlock.FormatTime(lock.DBTime)
		out.DBTime = &dbTime
		printJSON(out)
		return exitOK, nil
	}
	held := "no"
	if lock.Held {
		held = fmt.Sprintf("yes, for %s more", clock(int64(lock.LockUntil.Sub(lock.DBTime).Seconds())))
	}
	rows := [][2]string{
		{"name", lock.Name},
		{"held", held},
		{"locked by", lock.LockedBy},
		{"locked at", schedlock.FormatTime(lock.LockedAt)},
		{"lock until", schedlock.FormatTime(lock.LockUntil)},
		{"fencing token", strconv.FormatInt(lock.FencingToken, 10)},
	}
	if lock.LastCompletedSlot != nil && lock.LastCompletedAt != nil {
		rows = append(rows, [2]string{"last completed", *lock.LastCompletedSlot + " at " + schedlock.FormatTime(*lock.LastCompletedAt)})
	}
	rows = append(rows, [2]string{"database time", schedlock.FormatTime(lock.DBTime)})
	for _, row := range rows {
		fmt.Printf("%-14s %s\n", row[0], row[1])
	}
	return exitOK, nil
}

func release(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	token := args.token2
	if token == "-" {
		line, _ := bufio.NewReader(os.Stdin).ReadString('\n')
		token = strings.TrimSpace(line)
	}
	released, err := client.ReleaseRetrying(ctx, args.name, token, true, func(err error, delay time.Duration) {
		warn(fmt.Sprintf("release of %s failed, retrying in %ss: %v", pyRepr(args.name), formatG(delay.Seconds()), err))
	})
	if err != nil {
		return 0, err
	}
	fmt.Printf("released %s; free from %s\n", pyRepr(released.Name), schedlock.FormatTime(released.LockUntil))
	return exitOK, nil
}

func runs(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	var found []schedlock.Run
	cursor := ""
	for len(found) < args.limit {
		page, err := client.History(ctx, args.name, min(args.limit-len(found), 1000), cursor)
		if err != nil {
			return 0, err
		}
		found = append(found, page.Items...)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if args.json {
		out := items[runJSON]{Items: []runJSON{}}
		for _, run := range found {
			out.Items = append(out.Items, toRunJSON(run))
		}
		printJSON(out)
		return exitOK, nil
	}
	rows := [][]string{{"ACQUIRED AT", "DURATION", "OUTCOME", "SKIPPED", "FENCING", "LOCKED BY"}}
	for _, run := range found {
		who := run.LockedBy
		if run.ForcedBy != nil {
			who += fmt.Sprintf("  (forced by %s: %s)", *run.ForcedBy, orNone(run.ForceReason))
		}
		rows = append(rows, []string{schedlock.FormatTime(run.AcquiredAt), durationText(run.DurationMs), run.Outcome,
			strconv.FormatInt(run.Skipped, 10), strconv.FormatInt(run.FencingToken, 10), who})
	}
	printTable(rows)
	return exitOK, nil
}

func forceRelease(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	result, err := client.ForceRelease(ctx, args.name, args.reason)
	if err != nil {
		return 0, err
	}
	switch {
	case args.json:
		out := struct {
			Name   string   `json:"name"`
			Forced bool     `json:"forced"`
			Run    *runJSON `json:"run"`
		}{Name: result.Name, Forced: result.Forced}
		if result.Run != nil {
			run := toRunJSON(*result.Run)
			out.Run = &run
		}
		printJSON(out)
	case result.Forced:
		holder := ""
		if result.Run != nil {
			holder = ", held by " + result.Run.LockedBy
		}
		fmt.Printf("force-released %s%s; free from %s\n", pyRepr(result.Name), holder, schedlock.FormatTime(result.LockUntil))
	default:
		fmt.Printf("%s was not held; nothing changed\n", pyRepr(result.Name))
	}
	return exitOK, nil
}

// tickMarks is one character per tick state, for the LAST TICKS column (oldest first).
var tickMarks = map[string]string{"completed": "+", "failed": "F", "timed_out": "T", "missed": "M", "running": "R", "pending": "."}

func jobs(ctx context.Context, client *schedlock.Client, args arguments) (int, error) {
	var found []schedlock.Job
	cursor := ""
	for args.limit == 0 || len(found) < args.limit {
		limit := 1000
		if args.limit > 0 {
			limit = min(args.limit-len(found), 1000)
		}
		page, err := client.Jobs(ctx, schedlock.JobsOptions{Prefix: args.prefix, State: args.state, Limit: limit, Cursor: cursor})
		if err != nil {
			return 0, err
		}
		found = append(found, page.Items...)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if args.json {
		out := items[jobJSON]{Items: []jobJSON{}}
		for _, job := range found {
			recent := []string{}
			for _, tick := range job.Recent {
				recent = append(recent, tick.State)
			}
			var last *string
			if job.LastTick != nil {
				last = timeOrNil(&job.LastTick.Tick)
			}
			out.Items = append(out.Items, jobJSON{Name: job.Name, Schedule: job.Schedule, Timezone: job.Timezone,
				Grace: job.Grace, Paused: job.Paused, State: job.State, Recent: recent, LastTick: last,
				NextTick: timeOrNil(job.NextTick), LastCompletedAt: timeOrNil(job.LastCompletedAt)})
		}
		printJSON(out)
	} else {
		rows := [][]string{{"STATE", "NAME", "SCHEDULE", "LAST TICKS", "NEXT TICK", "LAST COMPLETED"}}
		for _, job := range found {
			schedule := job.Schedule
			if job.Timezone != "UTC" {
				schedule += " (" + job.Timezone + ")"
			}
			marks := ""
			for _, tick := range job.Recent {
				mark, ok := tickMarks[tick.State]
				if !ok {
					mark = "?"
				}
				marks += mark
			}
			if marks == "" {
				marks = "-"
			}
			rows = append(rows, []string{job.State, job.Name, schedule, marks, orDash(timeOrNil(job.NextTick)), orDash(timeOrNil(job.LastCompletedAt))})
		}
		printTable(rows)
	}
	if args.down {
		for _, job := range found {
			if job.State == "down" {
				return exitNotFound, nil // 1: as status says a lock is not there, a job that is not running
			}
		}
	}
	return exitOK, nil
}

func yesNo(held bool) string {
	if held {
		return "yes"
	}
	return "no"
}

func orDash(text *string) string {
	if text == nil {
		return "-"
	}
	return *text
}

func orNone(text *string) string {
	if text == nil {
		return "None"
	}
	return *text
}

// clock is whole seconds as 1h02m03s or 2m03s.
func clock(total int64) string {
	minutes, seconds := divmod(total, 60)
	hours, minutes := divmod(minutes, 60)
	if hours != 0 {
		return fmt.Sprintf("%dh%02dm%02ds", hours, minutes, seconds)
	}
	return fmt.Sprintf("%dm%02ds", minutes, seconds)
}

// durationText is a run's duration: 1.234s under a minute, else as clock.
func durationText(ms int64) string {
	total := float64(ms) / 1000
	if total < 60 {
		return strconv.FormatFloat(total, 'f', 3, 64) + "s"
	}
	return clock(int64(total))
}

// divmod is Python's: the remainder takes the divisor's sign.
func divmod(a, b int64) (int64, int64) {
	q, r := a/b, a%b
	if r != 0 && (r < 0) != (b < 0) {
		q, r = q-1, r+b
	}
	return q, r
}
