// Command corral is Corral's one binary: the server (serve), brains alone (harness), key management (keys),
// and a command-line client of the HTTP API (agents, envs, sessions, send, tail).
//
// It is the composition root: the only package that knows every backend and wires flags and environment into
// the components' configs.
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
	"syscall"

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
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(io.err)
		if len(args) == 0 {
			return 2
		}
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
			fmt.Fprintf(io.err, "corral %s: %v\n", args[0], err)
		}
		return 1
	}
	return 0
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

// newFlagSet returns a flag set that reports errors to io.err and prints "Usage: corral NAME SYNOPSIS" and
// its flags on -h.
func newFlagSet(io *stdio, name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("corral "+name, flag.ContinueOnError)
	fs.SetOutput(io.err)
	fs.Usage = func() {
		fmt.Fprintf(io.err, "Usage: corral %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags wherever they stand among the positional arguments ("tail SESSION --until-idle"), up to
// a "--", and leaves the positional arguments in fs.Args(). A parse error becomes errUsage (the flag package
// already printed it).
func parse(fs *flag.FlagSet, args []string) error {
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return err
			}
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
