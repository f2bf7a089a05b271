package main

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"

	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/wire"
)

// recordProblem is what in info's record does not read, or cannot be built
// on: the library's RecordError, or the largest term number (wire.MetaTerm),
// which reads but which no term can follow (the library refuses to continue
// it). nil if nothing.
func recordProblem(info leaderelection.LeaseInfo, container, blob string) *leaderelection.RecordError {
	if info.Leader.Number == math.MaxInt64 {
		return &leaderelection.RecordError{Container: container, Blob: blob, Key: wire.MetaTerm, Value: strconv.FormatInt(math.MaxInt64, 10),
			Rule: "is the largest term number: no term can follow it until it is repaired (a fencing token must never repeat or go down)"}
	}
	return info.RecordError
}

// repairAdvice is the repair to run for a record that does not read: the
// command, and what to choose for its term.
func repairAdvice(info leaderelection.LeaseInfo, container, blob string) string {
	cmd := "leaderctl repair -container " + shellQuote(container) + " -blob " + shellQuote(blob)
	var s string
	switch n := info.Leader.Number; {
	case n == math.MaxInt64:
		s = cmd + " -term N -allow-lower, N at least as high as any term a system downstream that fences on it saw (lowering the largest number is the only repair)"
	case info.RecordError != nil && info.RecordError.Key != wire.MetaTerm:
		// The term reads: keep it.
		s = fmt.Sprintf("%s -term %d (keeps the term)", cmd, n)
	default:
		s = cmd + " -term N, N at least as high as any term the fleet, or a system downstream that fences on it, saw"
	}
	if info.Held() {
		s = "once nobody holds the lease: " + s
	}
	return s
}

// shellSafe matches the words a POSIX shell takes as they are.
var shellSafe = regexp.MustCompile(`^[A-Za-z0-9_./:=@+-]+$`)

// shellQuote quotes s for a POSIX shell if it needs it.
func shellQuote(s string) string {
	if shellSafe.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
