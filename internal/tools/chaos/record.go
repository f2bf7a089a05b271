package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Record is one line of a chaos run's log (JSON lines). Contenders write the
// start and end of each term; the harness writes faults, spawns, kills and
// exits. Every stamp is CLOCK_MONOTONIC in nanoseconds: all processes share
// one machine, so stamps from different processes compare.
type Record struct {
	Mono int64  `json:"mono"`
	Who  string `json:"who"`  // the contender's lane name ("c1"...), or "harness"
	Kind string `json:"kind"` // one of the Kind* constants
	// Term is the term number (start, end, stopped).
	Term int64 `json:"term,omitempty"`
	// Expires is, for end, the CLOCK_MONOTONIC moment the term's lease
	// could first pass to another instance, as the contender's own requests
	// show it when its func returned: the send time of the last acquire or
	// renewal the server confirmed (for an ETag lease, of the last write
	// under the lease; for etcd, of the last grant or keepalive) + the
	// lease duration. 0 if unknown. (Runs recorded before this field moved
	// to end had it on stopped, from the library's own account.)
	Expires int64 `json:"expires,omitempty"`
	// Claimed is, for stopped, the same moment as the algorithm under test
	// reported it (the library's StoppedLeading LeaseExpiry).
	Claimed int64 `json:"claimed,omitempty"`
	// Fault is the fault kind (fault, heal), Target the lane it hit ("" for
	// storage-wide faults), Detail free text (the stop reason, the exit
	// status, the fault's parameters).
	Fault  string `json:"fault,omitempty"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
	// Requests is, for requests records, how many requests the contender
	// has sent so far (counted by a pipeline policy, or for etcd a gRPC
	// interceptor); Leases, Writes and Reads split them by class (see
	// reqcount.Counts).
	Requests int64 `json:"requests,omitempty"`
	Leases   int64 `json:"leases,omitempty"`
	Writes   int64 `json:"writes,omitempty"`
	Reads    int64 `json:"reads,omitempty"`
	// Accounts is, for a quorum contender's requests records, how many of
	// those requests went to each account.
	Accounts []int64 `json:"accounts,omitempty"`
	// Contender is, for spawn, what the lane runs (Contender.Label).
	Contender string `json:"contender,omitempty"`
	// Blob is, for malformed, repair and delete, the blob the other writer
	// wrote or deleted ("" for a container).
	Blob string `json:"blob,omitempty"`
}

// Record kinds.
const (
	KindStart    = "start"    // a contender's leader func started (Who, Term)
	KindEnd      = "end"      // a contender's leader func returned (Who, Term)
	KindStopped  = "stopped"  // the library reported the term over (Who, Term, Expires, Detail: reason)
	KindObserved = "observed" // a follower saw another contender lead with a term new to it (Who, Term)
	KindSpawn    = "spawn"    // the harness started a contender process (Who, Detail: pid)
	KindExit     = "exit"     // a contender process ended (Who, Detail: status)
	KindFault    = "fault"    // a fault began (Fault, Target, Detail)
	KindHeal     = "heal"     // that fault ended (Fault, Target)
	KindRequests = "requests" // a contender's request count so far (Who, Requests)
	KindShutdown = "shutdown" // the harness began stopping every contender
	// A quorum's (quorum.go).
	KindHeld     = "held"     // a quorum leader's accounts held changed: Detail "all", or what Degraded says
	KindRegained = "regained" // the harness saw the leader hold every account again after FaultAccountDown (Target, Detail: how soon)
	// The other writer's records (package tamper), stamped by the harness.
	KindMalformed = "malformed" // it wrote a malformed record (Blob, Detail: the tamper.Case), stamped when the write was answered
	KindRepair    = "repair"    // it rewrote that record valid (Blob, Term), stamped when the write was sent
	KindDelete    = "delete"    // it deleted a blob (Blob) or the container (Blob ""), stamped when the delete was sent
)

// Mono reads CLOCK_MONOTONIC, the clock every record is stamped with.
func Mono() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("chaos: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// MonoOf converts t, a time read in this process with its monotonic reading
// intact (from time.Now), to CLOCK_MONOTONIC nanoseconds.
func MonoOf(t time.Time) int64 {
	return Mono() - int64(time.Since(t))
}

// ReadRecords reads a run's records.jsonl.
func ReadRecords(path string) ([]Record, error) { return ReadJSONLines[Record](path) }

// ReadJSONLines reads a file of JSON values, one a line (a run's records).
func ReadJSONLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var recs []T
	dec := json.NewDecoder(f)
	for {
		var r T
		if err := dec.Decode(&r); err == io.EOF {
			return recs, nil
		} else if err != nil {
			return recs, fmt.Errorf("%s: %w", path, err)
		}
		recs = append(recs, r)
	}
}
