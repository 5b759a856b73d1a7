// Command saldo is the one binary of saldo: migrate, serve, dev, audit,
// bench, sim-provider and friends. Each subcommand lives in its own file and
// registers itself in the command table.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand of saldo.
type command struct {
	Name    string
	Summary string
	// Run executes the command with the arguments after its name. It returns
	// an error for a failure the user should see; errExit carries an exit
	// code without printing anything more.
	Run func(ctx context.Context, args []string) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.Name]; dup {
		panic("saldo: command registered twice: " + c.Name)
	}
	commands[c.Name] = c
}

// exitError ends the process with Code after the command printed its own
// output (audit verify exits 1 on violations, for example).
type exitError struct{ Code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// databaseURL adds the --database-url flag to fs; the returned function reads
// the flag, falling back to SALDO_DATABASE_URL, and fails with a clear
// message when neither is set.
func databaseURL(fs *flag.FlagSet) func() (string, error) {
	v := fs.String("database-url", "", "PostgreSQL URL (default $SALDO_DATABASE_URL)")
	return func() (string, error) {
		if *v != "" {
			return *v, nil
		}
		if env := os.Getenv("SALDO_DATABASE_URL"); env != "" {
			return env, nil
		}
		return "", errors.New("no database: pass --database-url or set SALDO_DATABASE_URL")
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: saldo <command> [flags]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-14s %s\n", n, commands[n].Summary)
	}
	fmt.Fprintln(os.Stderr, "\nRun 'saldo <command> -h' for a command's flags.")
}

func main() {
	applyGCDefault()
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help" {
		usage()
		os.Exit(2)
	}
	cmd, ok := commands[os.Args[1]]
	if !ok {
		fmt.Fprintf(os.Stderr, "saldo: unknown command %q\n\n", os.Args[1])
		usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cmd.Run(ctx, os.Args[2:])
	stop()
	if err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			os.Exit(ee.Code)
		}
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "saldo %s: %v\n", cmd.Name, err)
		os.Exit(1)
	}
}
