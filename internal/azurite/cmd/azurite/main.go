// Command azurite installs or runs the Azurite blob service that this
// module's tests use, via package internal/azurite.
//
// Usage:
//
//	go run ./internal/azurite/cmd/azurite install
//	go run ./internal/azurite/cmd/azurite run [-port N] [-location DIR]
//	go run ./internal/azurite/cmd/azurite -h
//
// install makes sure the pinned Azurite is in the npm cache prefix (CI runs
// it before the tests so that its time is not charged to the first test) and
// prints the path of the blob service script.
//
// run starts Azurite on 127.0.0.1, prints a connection string on one line of
// stdout (its AccountKey is Azurite's public development key, not a secret),
// copies Azurite's log to stderr, and stops Azurite on SIGINT or SIGTERM,
// leaving nothing listening. Under go run, SIGTERM go run itself (it dies
// and this program follows, on Linux) or SIGINT the process group, as Ctrl-C
// does (go run ignores a SIGINT sent to it alone). To point the tests at it:
//
//	LEADERELECTION_AZURITE_URL=http://127.0.0.1:N/devstoreaccount1 go test -race -count=1 -p 4 -timeout 30m work
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/blobelect/leaderelection/internal/azurite"
)

// init runs on the main thread, which lives as long as the process: the
// parent-death signal followGoRun asks for belongs to the thread that asks.
func init() { followGoRun() }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const usage = `usage:
  azurite install
  azurite run [-port N] [-location DIR]
  azurite -h`

// isHelp reports whether arg asks for the usage, in any of the spellings
// people try: asking is not a mistake, so it prints to stdout and exits 0.
func isHelp(arg string) bool {
	switch arg {
	case "-h", "-help", "--help", "help":
		return true
	}
	return false
}

// run runs the command line args (without the program name), printing its
// output, and usage asked for, to stdout.
func run(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return errors.New("azurite: missing subcommand\n" + usage)
	}
	if isHelp(args[0]) || len(args) == 2 && args[0] == "install" && isHelp(args[1]) {
		_, err := fmt.Fprintln(stdout, usage)
		return err
	}
	switch args[0] {
	case "install":
		if len(args) > 1 {
			return fmt.Errorf("azurite: install takes no arguments\n%s", usage)
		}
		ctx, cancel := signalContext()
		defer cancel()
		script, err := azurite.Install(ctx)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, script)
		return err
	case "run":
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard) // errors are returned, with the usage, to go to stderr
		port := fs.Int("port", 0, "loopback port to listen on (0: a free one)")
		location := fs.String("location", "", "directory to persist data in (empty: in memory)")
		if err := fs.Parse(args[1:]); errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stdout, "%s\n\nflags of run:\n", usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return nil
		} else if err != nil {
			return fmt.Errorf("azurite: run: %w\n%s", err, usage)
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("azurite: run: unexpected arguments %q\n%s", fs.Args(), usage)
		}
		ctx, cancel := signalContext()
		defer cancel()
		srv, err := azurite.Start(ctx, azurite.Options{Port: *port, Location: *location, Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, srv.ConnectionString())
		fmt.Fprintf(os.Stderr, "azurite: listening at %s (pid %d). The connection string's AccountKey is Azurite's well-known development key, "+
			"published in its documentation: not a secret, and good for nothing but an emulator. Stop with SIGTERM or SIGINT (Ctrl-C).\n", srv.URL(), os.Getpid())
		select {
		case <-ctx.Done():
			return srv.Stop()
		case <-srv.Done():
			// Azurite died on its own: Stop reports how.
			return srv.Stop()
		}
	default:
		return fmt.Errorf("azurite: unknown subcommand %q\n%s", args[0], usage)
	}
}

// signalContext is cancelled by Ctrl-C or a CI cancellation, which stops
// npm, or stops Azurite cleanly.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
