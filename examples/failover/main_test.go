package main

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain lets the demo start its contenders from the test binary, as it
// does from its own executable.
func TestMain(m *testing.M) {
	if name := os.Getenv(envContender); name != "" {
		if err := runContender(name, os.Getenv(envBlob)); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The README's first command: three processes, the leader SIGKILLed, then the
// next one SIGTERMed.
func TestDemoShowsCrashFailoverAndGracefulHandover(t *testing.T) {
	var out bytes.Buffer
	sum, err := runDemo(&out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	// The killed leader's lease runs out at most 15 s after its last
	// renewal, then a follower takes it within a 2 s retry interval.
	assert.Less(t, sum.CrashFailover, 17*time.Second+time.Second)
	assert.Greater(t, sum.CrashFailover, 15*time.Second-5*time.Second-time.Second, "the lease cannot pass before it expires")
	// A released lease is taken within one retry interval (2 s), plus the
	// time for the stopped process to cancel and release.
	assert.Less(t, sum.GracefulHandover, 2*time.Second+time.Second)
}
