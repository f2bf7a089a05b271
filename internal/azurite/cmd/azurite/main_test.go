package main

import (
	"strings"
	"testing"
)

// Asking for help is not a mistake: every usual spelling prints the usage
// to stdout and succeeds (exit status 0).
func TestHelpPrintsTheUsageAndSucceeds(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"help"}, {"install", "-h"}, {"run", "-h"}, {"run", "--help"}} {
		var out strings.Builder
		if err := run(args, &out); err != nil {
			t.Errorf("%q: %v", args, err)
		}
		if !strings.Contains(out.String(), "azurite run [-port N] [-location DIR]") {
			t.Errorf("%q printed %q, not the usage", args, out.String())
		}
		if args[0] == "run" && !strings.Contains(out.String(), "-port") {
			t.Errorf("%q printed %q, without run's flags", args, out.String())
		}
	}
}

// What is a mistake still fails, with the usage in the error (for stderr)
// and nothing on stdout.
func TestMistakesFailWithTheUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing subcommand"},
		{[]string{"start"}, `unknown subcommand "start"`},
		{[]string{"install", "now"}, "install takes no arguments"},
		{[]string{"run", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "extra"}, `unexpected arguments ["extra"]`},
	} {
		var out strings.Builder
		err := run(tc.args, &out)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "usage:") {
			t.Errorf("%q: got %v, want an error containing %q and the usage", tc.args, err, tc.want)
		}
		if out.Len() != 0 {
			t.Errorf("%q printed %q to stdout", tc.args, out.String())
		}
	}
}
