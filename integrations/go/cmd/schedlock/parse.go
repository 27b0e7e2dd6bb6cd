package main

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
)

// The command line is read as the Python CLI's argparse reads it: the connection options before the subcommand or
// after it (the later wins), "--opt value" or "--opt=value", unique prefixes of long options, "--" before a run's
// COMMAND; errors print the usage and "PROG: error: MESSAGE" on stderr and exit 2.

type option struct {
	long    string
	short   string
	value   bool
	choices []string
}

type command struct {
	name        string
	options     []option
	positionals []string // required positionals, by name ("name")
	required    []string // required options and positionals, in the order argparse names them
	runCommand  bool     // run: everything after "--" (or from the first positional on) is COMMAND
}

var subcommands = []string{"run", "list", "status", "release", "runs", "force-release", "jobs"}

var connection = []option{{long: "--url", value: true}, {long: "--api-token", value: true}, {long: "--timeout", value: true}}

var commands = map[string]command{
	"run": {name: "run", options: append([]option{
		{long: "--name", value: true}, {long: "--at-most", value: true}, {long: "--at-least", value: true},
		{long: "--keep-alive"}, {long: "--holder", value: true}, {long: "--held-exit-code", value: true},
		{long: "--fail-open"}, {long: "--kill-after", value: true}, {long: "--once-per", value: true},
		{long: "--timezone", value: true}, {long: "--slot", value: true}, {long: "--verbose", short: "-v"},
	}, connection...), required: []string{"--name", "--at-most", "COMMAND"}, runCommand: true},
	"list": {name: "list", options: append([]option{
		{long: "--prefix", value: true}, {long: "--held"}, {long: "--free"}, {long: "--limit", value: true},
		{long: "--json"},
	}, connection...)},
	"status":  {name: "status", options: append([]option{{long: "--json"}}, connection...), positionals: []string{"name"}, required: []string{"name"}},
	"release": {name: "release", options: append([]option{{long: "--token", value: true}}, connection...), positionals: []string{"name"}, required: []string{"name", "--token"}},
	"runs": {name: "runs", options: append([]option{{long: "--limit", value: true}, {long: "--json"}}, connection...),
		positionals: []string{"name"}, required: []string{"name"}},
	"force-release": {name: "force-release", options: append([]option{{long: "--reason", value: true}, {long: "--json"}}, connection...),
		positionals: []string{"name"}, required: []string{"name", "--reason"}},
	"jobs": {name: "jobs", options: append([]option{
		{long: "--prefix", value: true}, {long: "--state", value: true, choices: []string{"up", "late", "down", "paused", "new"}},
		{long: "--limit", value: true}, {long: "--down"}, {long: "--json"},
	}, connection...)},
}

var mainOptions = append([]option{{long: "--version"}}, connection...)

var negativeNumber = regexp.MustCompile(`^-\d+$|^-\d*\.\d+$`)

// usageError prints PROG's usage and the message, as argparse does; exit code 2.
type usageError struct {
	prog    string // "" for the main parser
	message string
}

func (u usageError) print() int {
	name, prog := "main", "schedlock"
	if u.prog != "" {
		name, prog = u.prog, "schedlock "+u.prog
	}
	fmt.Fprint(os.Stderr, usage(name))
	fmt.Fprintf(os.Stderr, "%s: error: %s\n", prog, u.message)
	return exitUsage
}

// usage is the "usage: ..." paragraph of a help text.
func usage(name string) string {
	text := help(name)
	if end := strings.Index(text, "\n\n"); end >= 0 {
		return text[:end+1]
	}
	return text
}

// resolve finds the option arg names among options: exactly, or as the unique prefix of one long option.
func resolve(arg string, options []option) (option, bool, error) {
	var matches []option
	for _, o := range options {
		if arg == o.long || (o.short != "" && arg == o.short) {
			return o, true, nil
		}
		if strings.HasPrefix(arg, "--") && strings.HasPrefix(o.long, arg) {
			matches = append(matches, o)
		}
	}
	if len(matches) == 1 {
		return matches[0], true, nil
	}
	if len(matches) > 1 {
		names := make([]string, len(matches))
		for i, m := range matches {
			names[i] = m.long
		}
		return option{}, false, fmt.Errorf("ambiguous option: %s could match %s", arg, strings.Join(names, ", "))
	}
	return option{}, false, nil
}

// scanned is one parser's reading of its arguments.
type scanned struct {
	values      map[string]string
	flags       map[string]bool
	positionals []string
	command     []string
	unknown     []string
	order       []string // options in the order given (for --held/--free)
}

// scan reads argv with options; stop, when set, is where the positionals end (the subcommand). Returns the help
// request as -h, or a usage error.
func scan(argv []string, options []option, runCommand bool, stopAtPositional bool) (scanned, []string, *usageError, bool) {
	s := scanned{values: map[string]string{}, flags: map[string]bool{}}
	for i := 0; i < len(argv); i++ {
		arg := argv[i]
		if arg == "--" {
			if runCommand {
				s.command = argv[i+1:]
			} else {
				s.positionals = append(s.positionals, argv[i+1:]...)
			}
			return s, nil, nil, false
		}
		if len(arg) < 2 || arg[0] != '-' || negativeNumber.MatchString(arg) {
			if runCommand {
				s.command = argv[i:]
				return s, nil, nil, false
			}
			if stopAtPositional {
				return s, argv[i:], nil, false
			}
			s.positionals = append(s.positionals, arg)
			continue
		}
		key, inline, hasInline := arg, "", false
		if strings.HasPrefix(arg, "--") {
			if eq := strings.Index(arg, "="); eq > 0 {
				key, inline, hasInline = arg[:eq], arg[eq+1:], true
			}
		}
		if key == "-h" || (strings.HasPrefix(key, "--") && strings.HasPrefix("--help", key) && len(key) > 2) {
			if _, exact, _ := resolve(key, options); !exact || key == "--help" || key == "-h" {
				return s, nil, nil, true
			}
		}
		found, ok, err := resolve(key, options)
		if err != nil {
			return s, nil, &usageError{message: err.Error()}, false
		}
		if !ok {
			s.unknown = append(s.unknown, arg)
			continue
		}
		if !found.value {
			if hasInline {
				return s, nil, &usageError{message: fmt.Sprintf("argument %s: ignored explicit argument %s", found.long, pyRepr(inline))}, false
			}
			s.flags[found.long] = true
			s.order = append(s.order, found.long)
			continue
		}
		value := inline
		if !hasInline {
			if i+1 >= len(argv) || (strings.HasPrefix(argv[i+1], "-") && len(argv[i+1]) > 1 && !negativeNumber.MatchString(argv[i+1])) {
				return s, nil, &usageError{message: fmt.Sprintf("argument %s: expected one argument", found.long)}, false
			}
			i++
			value = argv[i]
		}
		if found.choices != nil && !contains(found.choices, value) {
			quoted := make([]string, len(found.choices))
			for i, c := range found.choices {
				quoted[i] = pyRepr(c)
			}
			return s, nil, &usageError{message: fmt.Sprintf("argument %s: invalid choice: %s (choose from %s)", found.long, pyRepr(value), strings.Join(quoted, ", "))}, false
		}
		s.values[found.long] = value
		s.order = append(s.order, found.long)
	}
	return s, nil, nil, false
}

// parse reads the whole command line; done is true when the command ends here (help, version, a usage error), with
// its exit code.
func parse(argv []string) (arguments, int, bool) {
	var args arguments
	global, rest, problem, helped := scan(argv, mainOptions, false, true)
	if helped {
		fmt.Print(help("main"))
		return args, exitOK, true
	}
	if problem != nil {
		return args, problem.print(), true
	}
	if global.flags["--version"] {
		fmt.Println(version())
		return args, exitOK, true
	}
	if len(rest) == 0 {
		return args, usageError{message: "the following arguments are required: {" + strings.Join(subcommands, ",") + "}"}.print(), true
	}
	spec, known := commands[rest[0]]
	if !known {
		quoted := make([]string, len(subcommands))
		for i, c := range subcommands {
			quoted[i] = pyRepr(c)
		}
		return args, usageError{message: fmt.Sprintf("argument {%s}: invalid choice: %s (choose from %s)",
			strings.Join(subcommands, ","), pyRepr(rest[0]), strings.Join(quoted, ", "))}.print(), true
	}
	args.command = spec.name
	sub, _, problem, helped := scan(rest[1:], spec.options, spec.runCommand, false)
	if helped {
		fmt.Print(help(spec.name))
		return args, exitOK, true
	}
	if problem != nil {
		problem.prog = spec.name
		return args, problem.print(), true
	}
	fail := func(message string) (arguments, int, bool) {
		return args, usageError{prog: spec.name, message: message}.print(), true
	}
	// Conversions, in the order argparse makes them: the main parser's first.
	for i, values := range []map[string]string{global.values, sub.values} {
		if text, ok := values["--url"]; ok {
			args.url = text
		}
		if text, ok := values["--api-token"]; ok {
			args.token, args.tokenGiven = text, true
		}
		if text, ok := values["--timeout"]; ok {
			timeout, valid := seconds(text)
			if !valid {
				message := fmt.Sprintf("argument --timeout: invalid float value: %s", pyRepr(text))
				if i == 0 {
					return args, usageError{message: message}.print(), true
				}
				return fail(message)
			}
			args.timeout = timeout
		}
	}
	if text, ok := sub.values["--limit"]; ok {
		limit, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil {
			return fail(fmt.Sprintf("argument --limit: invalid positive_int value: %s", pyRepr(text)))
		}
		if limit < 1 {
			return fail("argument --limit: must be at least 1")
		}
		args.limit = limit
	} else if spec.name == "runs" {
		args.limit = 20
	}
	if sub.flags["--held"] && sub.flags["--free"] {
		first, second := "--held", "--free"
		for _, name := range sub.order {
			if name == "--free" || name == "--held" {
				first = name
				break
			}
		}
		if first == "--free" {
			second = "--held"
		}
		return fail(fmt.Sprintf("argument %s: not allowed with argument %s", second, first))
	}
	if spec.runCommand {
		if problem := runArguments(&args.run, sub); problem != "" {
			return fail(problem)
		}
	}
	var missing []string
	for _, name := range spec.required {
		switch {
		case name == "COMMAND":
			if len(sub.command) == 0 {
				missing = append(missing, name)
			}
		case strings.HasPrefix(name, "--"):
			if _, ok := sub.values[name]; !ok {
				missing = append(missing, name)
			}
		default:
			if len(sub.positionals) == 0 {
				missing = append(missing, name)
			}
		}
	}
	if len(missing) > 0 {
		return fail("the following arguments are required: " + strings.Join(missing, ", "))
	}
	unknown := append(global.unknown, sub.unknown...)
	if len(sub.positionals) > len(spec.positionals) {
		unknown = append(unknown, sub.positionals[len(spec.positionals):]...)
	}
	if len(unknown) > 0 {
		return args, usageError{message: "unrecognized arguments: " + strings.Join(unknown, " ")}.print(), true
	}
	if len(sub.positionals) > 0 {
		args.name = sub.positionals[0]
	}
	args.prefix, args.json, args.down = sub.values["--prefix"], sub.flags["--json"], sub.flags["--down"]
	args.token2, args.reason, args.state = sub.values["--token"], sub.values["--reason"], sub.values["--state"]
	if sub.flags["--held"] || sub.flags["--free"] {
		held := sub.flags["--held"]
		args.held = &held
	}
	if spec.runCommand {
		args.run.command = sub.command
		if problem := checkRun(&args.run); problem != "" {
			return fail(problem)
		}
	}
	return args, exitOK, false
}

// runArguments converts run's typed options (the ones argparse converts while parsing).
func runArguments(r *runOptions, s scanned) string {
	r.name, r.holder = s.values["--name"], s.values["--holder"]
	r.atMostText, r.atLeastText, r.killAfterText = s.values["--at-most"], "0s", "10s"
	if text, ok := s.values["--at-least"]; ok {
		r.atLeastText = text
	}
	if text, ok := s.values["--kill-after"]; ok {
		r.killAfterText = text
	}
	r.keepAlive, r.failOpen, r.verbose = s.flags["--keep-alive"], s.flags["--fail-open"], s.flags["--verbose"]
	r.slot, r.oncePer, r.timezone = s.values["--slot"], s.values["--once-per"], s.values["--timezone"]
	_, r.slotGiven = s.values["--slot"]
	_, r.oncePerGiven = s.values["--once-per"]
	_, r.timezoneGiven = s.values["--timezone"]
	if text, ok := s.values["--held-exit-code"]; ok {
		code, err := strconv.Atoi(strings.TrimSpace(text))
		if err != nil {
			return fmt.Sprintf("argument --held-exit-code: invalid int value: %s", pyRepr(text))
		}
		r.heldExitCode = code
	}
	return ""
}

func contains(list []string, value string) bool {
	for _, item := range list {
		if item == value {
			return true
		}
	}
	return false
}
