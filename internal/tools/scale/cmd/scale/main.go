// Command scale measures many mutexes in one process (see package scale):
// how long until all lead, goroutines, CPU and memory, requests per mutex,
// and terms lost while all lead.
//
//	go run ./internal/tools/scale/cmd/scale -mutexes 1000 -steady 5m
//	go run ./internal/tools/scale/cmd/scale -mutexes 1000 -steady 1m -json
//
// It uses the Azurite at $LEADERELECTION_AZURITE_URL if set, and otherwise
// starts its own (a child process, so its CPU and memory are not counted).
// Progress and the library's warnings go to standard error; the result goes
// to standard output, as a summary or, with -json, as one JSON object with
// the fields of scale.Result (durations in nanoseconds). It exits 1 if the
// run failed, after printing what was measured.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/scale"
)

func main() {
	mutexes := flag.Int("mutexes", scale.DefaultMutexes, "number of mutexes, each on its own blob")
	steady := flag.Duration("steady", scale.DefaultSteady, "how long to observe once all lead")
	asJSON := flag.Bool("json", false, "print the result as JSON")
	flag.Parse()
	if flag.NArg() > 0 || *mutexes <= 0 || *steady <= 0 {
		fmt.Fprintln(os.Stderr, "usage: scale [-mutexes N>0] [-steady D>0] [-json]")
		os.Exit(2)
	}
	os.Exit(run(*mutexes, *steady, *asJSON))
}

func run(mutexes int, steady time.Duration, asJSON bool) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	conn, stopAzurite, err := azurite.Endpoint(startCtx)
	cancel()
	defer func() {
		if err := stopAzurite(); err != nil {
			fmt.Fprintln(os.Stderr, "scale: stopping Azurite:", err)
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		return 1
	}
	where := "a private Azurite"
	if u := os.Getenv(azurite.EnvURL); u != "" {
		where = u
	}
	fmt.Fprintf(os.Stderr, "scale: %d mutexes against %s, steady period %v\n", mutexes, where, steady)

	res, runErr := scale.Run(ctx, scale.Config{
		ConnectionString: conn,
		Mutexes:          mutexes,
		Steady:           steady,
		Progress:         os.Stderr,
	})
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, "scale:", err)
			return 1
		}
	} else {
		fmt.Print(res.Summary())
	}
	if runErr != nil {
		fmt.Fprintln(os.Stderr, "scale:", runErr)
		return 1
	}
	return 0
}
