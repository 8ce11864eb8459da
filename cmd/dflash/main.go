// Command dflash trains speculative-decoding drafters on the CPU or on NVIDIA GPUs.
//
// Usage:
//
//	dflash <command> [flags]
//
// Each command lives in its own file of this package and registers itself
// with register in an init function; `dflash help <command>` and
// `dflash <command> --help` print its flags.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"

	"dflash/internal/switches"
	"dflash/train"
)

// command is one subcommand of dflash.
type command struct {
	name    string
	summary string
	// run executes the command with the arguments after its name. It returns
	// flag.ErrHelp when help was asked for and printed.
	run func(args []string) error
}

var commands = map[string]*command{}

// register adds c to the command table; it panics on a duplicate name.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("dflash: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// usage prints the commands to w: stdout when help was asked for, else stderr.
func usage(w io.Writer) {
	fmt.Fprintf(w, "dflash trains speculative-decoding (DFlash) drafters.\n\nUsage:\n  dflash <command> [flags]\n\nCommands:\n")
	listCommands(w, commands)
	fmt.Fprintf(w, "\nRun 'dflash <command> --help' for a command's flags.\nLogs go to stderr; set DFLASH_LOG=debug|info|warn|error to choose the level.\n")
}

// listCommands prints one line per command, name and summary, in name order.
func listCommands(w io.Writer, cmds map[string]*command) {
	for _, n := range slices.Sorted(maps.Keys(cmds)) {
		fmt.Fprintf(w, "  %-10s %s\n", n, cmds[n].summary)
	}
}

// setupLogging logs to stderr at DFLASH_LOG's level; a bad value leaves it
// at info, and runMain refuses it before any command runs.
func setupLogging() {
	level := slog.LevelInfo
	name, _ := switches.Log.Value()
	switch name {
	case "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
}

func main() {
	setupLogging()
	os.Exit(runMain(os.Args[1:]))
}

// runMain runs the command line args (without the program name) and returns the
// exit status: 0, 1 for an error, 2 for a usage error, 128+n after signal n.
func runMain(args []string) int {
	if len(args) < 1 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	switch name {
	case "-h", "--help", "help":
		if len(args) > 1 {
			if c, ok := commands[args[1]]; ok {
				_ = c.run([]string{"--help"})
				return 0
			}
		}
		usage(os.Stdout)
		return 0
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "dflash: unknown command %q\n\n", name)
		usage(os.Stderr)
		return 2
	}
	if err := switches.Validate(); err != nil {
		fmt.Fprintf(os.Stderr, "dflash %s: %v\n", name, err)
		return 1
	}
	if err := c.run(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		var ce *commandError
		if errors.As(err, &ce) {
			name = ce.cmd
		}
		fmt.Fprintf(os.Stderr, "dflash %s: %v\n", name, err)
		var ee *exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		return 1
	}
	return 0
}

// exitError is an error with its own exit status.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// commandError is an error of the subcommand cmd (say "data prep"): runMain
// names cmd in front of the message instead of the top-level command.
type commandError struct {
	cmd string
	err error
}

func (e *commandError) Error() string { return e.err.Error() }
func (e *commandError) Unwrap() error { return e.err }

// signalContext returns a context that the first SIGINT or SIGTERM cancels, and
// caught, which returns that signal (nil before one came). After the first signal
// the default handling is back, so a second one ends the process at once. stop
// releases the handler.
func signalContext() (ctx context.Context, caught func() os.Signal, stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var got os.Signal
	go func() {
		select {
		case s := <-ch:
			mu.Lock()
			got = s
			mu.Unlock()
			signal.Reset(os.Interrupt, syscall.SIGTERM)
			cancel()
		case <-ctx.Done():
		}
	}()
	caught = func() os.Signal {
		mu.Lock()
		defer mu.Unlock()
		return got
	}
	return ctx, caught, func() { signal.Stop(ch); cancel() }
}

// withSignals runs fn with a context that the first SIGINT or SIGTERM cancels.
// After a signal the error is "interrupted by SIG..." with the exit status
// 128+signal, whatever fn returned (commands that leave something to resume,
// like train, say more themselves).
func withSignals(fn func(ctx context.Context) error) error {
	ctx, caught, stop := signalContext()
	defer stop()
	err := fn(ctx)
	if sig := caught(); sig != nil {
		return &exitError{code: signalStatus(sig), err: fmt.Errorf("interrupted by %s", signalName(sig))}
	}
	return err
}

// signalStatus is the conventional exit status after signal s: 128 + its number
// (130 for SIGINT, 143 for SIGTERM).
func signalStatus(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 1
}

func signalName(s os.Signal) string {
	switch s {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return s.String()
}

// shellQuote quotes args for a POSIX shell, leaving plain words as they are.
func shellQuote(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		plain := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r)) {
				plain = false
				break
			}
		}
		if plain {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// newFlagSet returns a flag set for a command whose usage text names the
// command and lists its flags.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: dflash %s\n\nFlags:\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, flags and arguments in any order (see
// parseInterspersed); fs.Args are the arguments afterwards. Help asked for (-h,
// --help) is printed to stdout and is flag.ErrHelp; a bad flag or value is a
// usage error (exit status 2) that says what is wrong and where help is,
// printed once by runMain, without the listing.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var out bytes.Buffer
	fs.SetOutput(&out)
	positional, err := parseInterspersed(fs, args)
	fs.SetOutput(nil) // later fs.Usage calls print to stderr
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Stdout.Write(out.Bytes())
		return err
	case err != nil:
		return usageError(fmt.Errorf("%v (see dflash %s --help)", err, fs.Name()))
	}
	// A parse of the terminator alone leaves the arguments in fs.Args.
	return fs.Parse(append([]string{"--"}, positional...))
}

// usageError gives err the exit status of a usage error, 2.
func usageError(err error) error { return &exitError{code: 2, err: err} }

// subcommands dispatches args to one of subs, printing a listing when no
// known subcommand is given.
func subcommands(parent string, subs map[string]*command, args []string) error {
	list := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: dflash %s <subcommand> [flags]\n\nSubcommands:\n", parent)
		listCommands(w, subs)
	}
	if len(args) == 0 {
		list(os.Stderr)
		return usageError(fmt.Errorf("missing subcommand"))
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		list(os.Stdout)
		return flag.ErrHelp
	}
	s, ok := subs[args[0]]
	if !ok {
		list(os.Stderr)
		return usageError(fmt.Errorf("unknown subcommand %q", args[0]))
	}
	if err := s.run(args[1:]); err != nil {
		return &commandError{cmd: parent + " " + s.name, err: err}
	}
	return nil
}

// parseOptions parses args into fs, whose options o binds (train.BindOptions), and
// checks every option against its range (parseOptionArgs). Arguments after the
// flags are an error.
func parseOptions(fs *flag.FlagSet, o *train.Options, args []string) error {
	if err := parseOptionArgs(fs, o, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fmt.Errorf("unexpected argument %q (every option is a --flag)", fs.Arg(0)))
	}
	return nil
}

// parseOptionArgs parses args into fs, whose options o binds, and checks every
// option against its range: a value out of range is a usage error that names the
// flag as typed, the value and the range. fs.Args are the other arguments.
func parseOptionArgs(fs *flag.FlagSet, o *train.Options, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	o.Apply()
	if err := o.Validate(); err != nil {
		return usageError(err)
	}
	return nil
}

// writeJSON prints v to w as one indented JSON object (the --json output of
// every command).
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
