// Command azurite installs or runs the Azurite blob service that this
// module's tests use, via package internal/azurite.
//
// Usage:
//
//	go run ./internal/azurite/cmd/azurite install
//	go run ./internal/azurite/cmd/azurite run [-port N] [-location DIR]
//
// install makes sure the pinned Azurite is in the npm cache prefix (CI runs
// it before the tests so that its time is not charged to the first test) and
// prints the path of the blob service script.
//
// run starts Azurite on 127.0.0.1, prints a connection string on one line of
// stdout, copies Azurite's log to stderr, and stops Azurite on SIGINT or
// SIGTERM. To point the tests at it:
//
//	LEADERELECTION_AZURITE_URL=http://127.0.0.1:N/devstoreaccount1 go test -race -count=1 work
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/blobelect/leaderelection/internal/azurite"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

const usage = `usage:
  azurite install
  azurite run [-port N] [-location DIR]`

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("azurite: missing subcommand\n" + usage)
	}
	// Ctrl-C or a CI cancellation stops npm, or stops Azurite cleanly.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	switch args[0] {
	case "install":
		if len(args) > 1 {
			return fmt.Errorf("azurite: install takes no arguments\n%s", usage)
		}
		script, err := azurite.Install(ctx)
		if err != nil {
			return err
		}
		fmt.Println(script)
		return nil
	case "run":
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		port := fs.Int("port", 0, "loopback port to listen on (0: a free one)")
		location := fs.String("location", "", "directory to persist data in (empty: in memory)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("azurite: run: unexpected arguments %q\n%s", fs.Args(), usage)
		}
		srv, err := azurite.Start(ctx, azurite.Options{Port: *port, Location: *location, Log: os.Stderr})
		if err != nil {
			return err
		}
		fmt.Println(srv.ConnectionString())
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
