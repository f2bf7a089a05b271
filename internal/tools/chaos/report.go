package chaos

import "time"

// Report is what the checker found in a run's records.
type Report struct {
	Seed  int64
	Start int64    // CLOCK_MONOTONIC ns of the run's first record
	End   int64    // and of its last
	Lanes []string // contender lanes, in order
	// LaneLabels says what each lane ran (Contender.Label), when the run
	// recorded it.
	LaneLabels map[string]string
	Terms      []TermSpan
	Faults     []FaultResult
	Overlap    []Overlap // two leader funcs running at once, not excused by a freeze
	// Amnesia are overlaps after Azurite restarted without a lease it had
	// granted (it saves its data only every few seconds): a storage fault
	// no client can guard against, reported apart.
	Amnesia []Overlap
	Frozen  []Wake // overlaps excused because the older leader was frozen (SIGSTOP)
	// Liveness lists the faults after whose healing no leader appeared
	// within the liveness bound.
	Liveness []FaultResult
	// TermOrder are func starts whose term was not above every earlier
	// start's on the blob, across the whole run (deletions and repairs
	// included), or was below 1.
	TermOrder []TermRegression
	// TermAmnesia are such starts right after a storage restart that
	// forgot the record of the term before (see CheckTermOrder), reported
	// apart, as Amnesia is.
	TermAmnesia []TermRegression
	// UnderMalformed are funcs that started while the blob carried a
	// malformed record that leaves no next term (garbage, overflow),
	// before its repair: their term was made up.
	UnderMalformed []TermSpan
	// Exits are contender processes that exited with no fault of the
	// harness's stopping them: a contender must not give up on a blob it
	// finds malformed or gone.
	Exits []Exit
	// Messy is what the other writer did: malformed records written and
	// repaired, blobs and containers deleted.
	Messy Messy
	// Deletions are when the other writer's deletions (of a blob or the
	// container) were sent, CLOCK_MONOTONIC ns, in order.
	Deletions []int64
}

// TermSpan is one run of a leader func, on one lane.
type TermSpan struct {
	Who    string
	Number int64
	Start  int64 // CLOCK_MONOTONIC ns
	End    int64 // when the func returned, or the process died; 0 if still running at the end
	Killed bool  // the process died (SIGKILL) while the func ran: End is the kill
	// Expires is when the term's lease could first pass to another
	// instance, from the contender's own requests (see Record.Expires; 0
	// unknown, e.g. for a killed process); Claimed is that moment as the
	// algorithm under test reported it.
	Expires int64
	Claimed int64
	Reason  string // why it ended, as the library reported it
}

// StopMargin is how long before its lease could expire the term's func
// returned; ok is false when that is unknown.
func (t TermSpan) StopMargin() (time.Duration, bool) {
	if t.Expires == 0 || t.End == 0 || t.Killed {
		return 0, false
	}
	return time.Duration(t.Expires - t.End), true
}

// FaultResult is one injected fault and what followed it.
type FaultResult struct {
	Kind   string
	Target string // the lane hit; "" for storage-wide faults
	// TargetRuns is what that lane ran (Contender.Label), if recorded.
	TargetRuns string
	Detail     string
	At         int64 // CLOCK_MONOTONIC ns when the fault began
	Healed     int64 // and when it ended
	// LeaderAt is who led when the fault began ("" nobody).
	LeaderAt string
	// Changed is whether leadership moved: the leader at the fault's start
	// ended its term before the fault's effects were over.
	Changed bool
	// Gap is the time from the fault's start to the next term's start,
	// when leadership changed; the leaderless time.
	Gap time.Duration
	// StopMargin is how long before its lease could expire the old
	// leader's func returned, when it ended its term; ok false if unknown.
	StopMargin   time.Duration
	StopMarginOK bool
	// Recovered is the time from the fault's healing until a leader
	// existed (0 if one existed throughout).
	Recovered time.Duration
}

// Overlap is two leader funcs running at once.
type Overlap struct {
	A, B     TermSpan
	Duration time.Duration
}

// Wake is an overlap excused by a freeze: the older leader was stopped by
// SIGSTOP while the newer one started. AfterCont is how long after SIGCONT
// its func returned: the time to deliver a cancelled context.
type Wake struct {
	Frozen, Newer TermSpan
	Cont          int64 // CLOCK_MONOTONIC ns of the SIGCONT
	AfterCont     time.Duration
}
