package main

import (
	"math"
	"strconv"

	"github.com/blobelect/leaderelection"
)

// metaTerm is the record's key for the term number (the library's
// term.go), for the one problem the library reads without a RecordError.
const metaTerm = "leaderterm"

// recordProblem is what in info's record does not read, or cannot be built
// on: the library's RecordError, or the largest term number, which reads but
// which no term can follow (the library refuses to continue it). nil if
// nothing.
func recordProblem(info leaderelection.LeaseInfo, container, blob string) *leaderelection.RecordError {
	if info.Leader.Number == math.MaxInt64 {
		return &leaderelection.RecordError{Container: container, Blob: blob, Key: metaTerm, Value: strconv.FormatInt(math.MaxInt64, 10),
			Rule: "is the largest term number: no term can follow it until it is repaired (a fencing token must never repeat or go down)"}
	}
	return info.RecordError
}
