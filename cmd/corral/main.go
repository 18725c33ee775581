// Command corral is Corral's one binary: the server (serve), brains alone (harness), the benchmark (bench), the
// management of a server's store (keys, vault), a command-line client of the HTTP API (agents, envs, sessions,
// send, tail), and the in-sandbox agent when invoked as corral-sandbox-agent.
//
// It is the composition root: the only package that reads the environment, knows every backend (backends.go)
// and wires flags and environment into the components' configs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	_ "time/tzdata" // deployments' schedules name IANA timezones: the binary carries the database, whatever the host has

	"github.com/corralhq/corral/internal/sandbox/agent"
)

// command is one subcommand. Each lives in its own file.
type command struct {
	summary string
	run     func(ctx context.Context, io *stdio, args []string) error
}

// stdio is where commands write, injectable for tests.
type stdio struct {
	out, err io.Writer
}

var commands = map[string]command{}

func register(name, summary string, run func(ctx context.Context, io *stdio, args []string) error) {
	commands[name] = command{summary: summary, run: run}
}

// errUsage marks an error that was already reported with usage text.
var errUsage = errors.New("usage")

func main() {
	// The binary doubles as the in-sandbox agent: sandboxes start it under the agent's name.
	if base := filepath.Base(os.Args[0]); base == agentName || os.Args[0] == agent.BinPath {
		os.Exit(agent.Main(os.Args[1:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, &stdio{out: os.Stdout, err: os.Stderr}, os.Args[1:])
	stop()
	os.Exit(code)
}

func run(ctx context.Context, io *stdio, args []string) int {
	if len(args) == 0 {
		usage(io.err)
		return 2
	}
	if isHelp(args[0]) {
		if args[0] == "help" && len(args) > 1 { // corral help COMMAND [VERB]: that command's help
			return run(ctx, io, append(args[1:], "-h"))
		}
		usage(io.out)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(io.err, "corral: unknown command %q\n\n", args[0])
		usage(io.err)
		return 2
	}
	if err := cmd.run(ctx, io, args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		if !errors.Is(err, errUsage) {
			fmt.Fprintf(io.err, "corral %s: %v\n", args[0], explain(err))
		}
		return 1
	}
	return 0
}

// isHelp reports whether arg asks for help: -h, -help, --help or help.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--h", "--help", "help":
		return true
	}
	return false
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Corral hosts long-running AI agents behind the Claude Managed Agents API.")
	fmt.Fprintln(w, "\nUsage: corral <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for name := range commands {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, commands[name].summary)
	}
	fmt.Fprintln(w, "\nRun 'corral <command> -h' for a command's flags.")
}

// verb is one subcommand of a command group ("agents create").
type verb struct {
	name, summary string
	run           func(context.Context, *stdio, []string) error
}

// subcommand dispatches "corral NOUN VERB ..." to the verb. "corral NOUN -h" (or --help, or help) prints the
// verbs to stdout; "corral NOUN help VERB" is "corral NOUN VERB -h".
func subcommand(ctx context.Context, std *stdio, noun string, args []string, verbs []verb) error {
	names := make([]string, len(verbs))
	for i, v := range verbs {
		names[i] = v.name
	}
	groupUsage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage: corral %s <%s> [flags]\n\nCommands:\n", noun, strings.Join(names, "|"))
		for _, v := range verbs {
			fmt.Fprintf(w, "  %-10s %s\n", v.name, v.summary)
		}
		fmt.Fprintf(w, "\nRun 'corral %s <command> -h' for a command's flags.\n", noun)
	}
	if len(args) == 0 {
		groupUsage(std.err)
		return errUsage
	}
	if isHelp(args[0]) {
		if args[0] == "help" && len(args) > 1 {
			return subcommand(ctx, std, noun, []string{args[1], "-h"}, verbs)
		}
		groupUsage(std.out)
		return flag.ErrHelp
	}
	for _, v := range verbs {
		if v.name == args[0] {
			return v.run(ctx, std, args[1:])
		}
	}
	fmt.Fprintf(std.err, "corral %s: unknown subcommand %q (want %s)\n", noun, args[0], strings.Join(names, ", "))
	return errUsage
}

// flagOutput is where a flag set writes: stderr, for parse errors and for the usage a command prints when its
// arguments are wrong. It carries the command's stdio, so that parse can print the usage -h asks for to stdout.
type flagOutput struct{ *stdio }

func (o flagOutput) Write(p []byte) (int, error) { return o.err.Write(p) }

// newFlagSet returns a flag set that reports errors to io.err and prints "Usage: corral NAME SYNOPSIS" and
// its flags: on -h to io.out, else (fs.Usage() after wrong arguments) to io.err.
func newFlagSet(io *stdio, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("corral "+name, flag.ContinueOnError)
	fs.SetOutput(flagOutput{io})
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: corral %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags wherever they stand among the positional arguments ("tail SESSION --until-idle"), up to
// a "--", and leaves the positional arguments in fs.Args(). A parse error becomes errUsage (the error and a line
// naming -h went to stderr); -h or --help prints the usage to stdout and returns flag.ErrHelp (exit 0).
func parse(fs *flag.FlagSet, args []string) error {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on -h and on errors: which stream it goes to is decided here
	defer func() { fs.Usage = usage }()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				if o, ok := fs.Output().(flagOutput); ok {
					// A usage func writes to fs.Output() or, if it is its command's own, to io.err: for -h both
					// are stdout.
					saved := *o.stdio
					o.stdio.err = o.stdio.out
					defer func() { *o.stdio = saved }()
				}
				usage()
				return err
			}
			// The flag package printed the error; the usage (90 lines for serve) would bury it.
			fmt.Fprintf(fs.Output(), "Run '%s -h' for its flags.\n", fs.Name())
			return errUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	return fs.Parse(append([]string{"--"}, positional...))
}

// parseArgs is parse for a command that takes exactly n positional arguments: any other count prints the usage
// and fails with errUsage.
func parseArgs(fs *flag.FlagSet, args []string, n int) error {
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != n {
		fs.Usage()
		return errUsage
	}
	return nil
}
