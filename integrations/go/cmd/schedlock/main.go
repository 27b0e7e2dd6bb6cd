// Command schedlock runs a command under a schedlock lock, and inspects or releases locks: the Python client's
// `schedlock` command (docs/cli.md) as one static file, for images without Python. Same subcommands, options,
// environment, output and exit codes; tests/system/cli_conformance runs one suite against both.
//
//	schedlock run --name nightly-backup --at-most 2h --keep-alive -- /usr/local/bin/backup.sh
package main

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/schedlock/schedlock/integrations/go/schedlock"
)

// Exit codes (the command's own pass through under run).
const (
	exitOK            = 0
	exitNotFound      = 1  // status/release/force-release: no such lock; release: the token does not hold it
	exitUsage         = 2  // bad arguments
	exitRejected      = 64 // the service rejected the request
	exitUnavailable   = 69 // the lock service is unavailable: the command was not run
	exitLockLost      = 75 // --keep-alive lost the lock and the command was terminated
	exitCannotExecute = 126
	exitNotFoundCmd   = 127
)

// The help texts are the Python CLI's own (scripts/cli_help.py writes them from its parser), so that both say the
// same; tests/system/cli_conformance compares them.
//
//go:embed help/*.txt
var helpFiles embed.FS

// minimumKeepAlive is keep-alive's floor for --at-most (ShedLock's rule). A test build lowers it with
// -ldflags "-X main.minimumKeepAlive=1s", as the Python suite lowers its constant, so tests need not wait minutes.
var minimumKeepAlive = "30s"

func main() {
	os.Exit(mainWithArgs(os.Args[1:]))
}

func mainWithArgs(argv []string) int {
	args, code, done := parse(argv)
	if done {
		return code
	}
	client := &schedlock.Client{URL: args.url, Token: args.token, Timeout: args.timeout}
	if client.URL == "" {
		client.URL = os.Getenv(schedlock.EnvURL)
	}
	if !args.tokenGiven {
		client.Token = os.Getenv(schedlock.EnvToken)
		if client.Token == "" {
			client.TokenFile = os.Getenv(schedlock.EnvTokenFile)
		}
	}
	ctx := context.Background()
	var err error
	switch args.command {
	case "run":
		return run(ctx, client, args.run)
	case "list":
		code, err = list(ctx, client, args)
	case "status":
		code, err = status(ctx, client, args)
	case "release":
		code, err = release(ctx, client, args)
	case "runs":
		code, err = runs(ctx, client, args)
	case "force-release":
		code, err = forceRelease(ctx, client, args)
	case "jobs":
		code, err = jobs(ctx, client, args)
	}
	if err == nil {
		return code
	}
	return failure(err)
}

// failure reports an error of a command other than run, and returns its exit code.
func failure(err error) int {
	var api *schedlock.APIError
	var name *schedlock.NameError
	switch {
	case errors.Is(err, schedlock.ErrUnavailable):
		say("lock service unavailable: " + err.Error())
		return exitUnavailable
	case errors.Is(err, schedlock.ErrNotFound), errors.Is(err, schedlock.ErrNotHolder):
		errors.As(err, &api)
		say(api.Message)
		return exitNotFound
	case errors.As(err, &api):
		say("the lock service rejected the request: " + err.Error())
		return exitRejected
	case errors.As(err, &name):
		say(name.Message)
		return exitUsage
	}
	say(err.Error())
	return exitUnavailable
}

func say(message string) { fmt.Fprintf(os.Stderr, "schedlock: %s\n", message) }

// arguments is the parsed command line.
type arguments struct {
	command    string
	url        string
	token      string
	tokenGiven bool
	timeout    time.Duration
	// list, status, release, runs, force-release, jobs
	name     string
	prefix   string
	held     *bool
	limit    int
	json     bool
	token2   string // release --token
	reason   string
	state    string
	down     bool
	run      runOptions
	values   map[string]string
	flags    map[string]bool
	commands []string
}

func help(name string) string {
	text, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic(err)
	}
	return string(text)
}

func version() string { return "schedlock " + schedlock.Version }

func seconds(text string) (time.Duration, bool) {
	value, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(value * float64(time.Second)), true
}
