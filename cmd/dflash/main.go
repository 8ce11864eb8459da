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
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
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

func usage() {
	fmt.Fprintf(os.Stderr, "dflash trains speculative-decoding (DFlash) drafters.\n\nUsage:\n  dflash <command> [flags]\n\nCommands:\n")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintf(os.Stderr, "\nRun 'dflash <command> --help' for a command's flags.\nLogs go to stderr; set DFLASH_LOG=debug|info|warn|error to choose the level.\n")
}

func setupLogging() {
	level := slog.LevelInfo
	switch strings.ToLower(os.Getenv("DFLASH_LOG")) {
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
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	name := os.Args[1]
	switch name {
	case "-h", "--help", "help":
		if len(os.Args) > 2 {
			if c, ok := commands[os.Args[2]]; ok {
				_ = c.run([]string{"--help"})
				return
			}
		}
		usage()
		return
	}
	c, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "dflash: unknown command %q\n\n", name)
		usage()
		os.Exit(2)
	}
	if err := c.run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintf(os.Stderr, "dflash %s: %v\n", name, err)
		os.Exit(1)
	}
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

// subcommands dispatches args to one of subs, printing a listing when no
// known subcommand is given.
func subcommands(parent string, subs map[string]*command, args []string) error {
	list := func() {
		fmt.Fprintf(os.Stderr, "Usage: dflash %s <subcommand> [flags]\n\nSubcommands:\n", parent)
		names := make([]string, 0, len(subs))
		for n := range subs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(os.Stderr, "  %-10s %s\n", n, subs[n].summary)
		}
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		list()
		if len(args) == 0 {
			return fmt.Errorf("missing subcommand")
		}
		return flag.ErrHelp
	}
	s, ok := subs[args[0]]
	if !ok {
		list()
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
	return s.run(args[1:])
}
