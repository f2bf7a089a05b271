package leaderelection

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"
)

// Term is one period of leadership.
type Term struct {
	// Number is the fencing token: strictly greater than every earlier
	// term's on the same blob, across all instances, restarts and lease
	// breaks, and across the blob's deletion while an instance that saw its
	// terms runs (see docs/guarantees.md on what survives the loss of the blob). A
	// downstream system that
	// remembers the highest number it has seen, and rejects writes carrying
	// a lower one, cannot be written to by a leader that was superseded.
	Number int64
	// Identity is the leader's identity (see [WithIdentity]).
	Identity string
	// LeaseID is the lease ID the leader holds.
	LeaseID string
	// Since is when the leader proposed the term, by its wall clock, in
	// UTC: after it took the lease, and before its func started (a quorum's
	// leader may propose one term several times before a majority stores
	// it: Since is the first).
	Since time.Time
}

// String describes t for a log line, without its lease ID: whoever holds a
// lease's ID can renew, release or write under it as if it were the holder.
func (t Term) String() string {
	s := fmt.Sprintf("Term{%d Identity:%q", t.Number, t.Identity)
	if !t.Since.IsZero() {
		s += " Since:" + formatEventTime(t.Since)
	}
	return s + "}"
}

// GoString, Format and LogValue print String, so that no verb and no
// log/slog handler prints the lease ID.
func (t Term) GoString() string              { return t.String() }
func (t Term) Format(f fmt.State, verb rune) { printRedacted(f, verb, t.String()) }
func (t Term) LogValue() slog.Value          { return slog.StringValue(t.String()) }

// defaultIdentity is readable and unique per process: host name, process ID
// and a short random suffix (two processes may share a host name and a PID,
// in containers).
func defaultIdentity() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// checkIdentity keeps identities to what blob metadata values carry
// unchanged. Metadata travels in HTTP headers, whose values lose leading and
// trailing spaces on the way (Go's client trims them): with an account key
// the write is then refused (the SDK signed the untrimmed value), with a SAS
// the stored identity silently differs from ours. Inner runs of spaces are
// kept as they are (measured on Azurite, with a key and with a SAS).
func checkIdentity(id string) error {
	if carriesSecret(id) {
		// Identities go into every log line and record.
		return errors.New("leaderelection: identity looks like a connection string or a SAS URL " + secretUnshown)
	}
	if id == "" || len(id) > 256 {
		return fmt.Errorf("leaderelection: identity must be 1 to 256 characters, got %d", len(id))
	}
	for _, r := range id {
		if r < 0x20 || r > 0x7e {
			return fmt.Errorf("leaderelection: identity must be printable ASCII (it is stored in blob metadata), got %s", shown(id))
		}
	}
	if id[0] == ' ' || id[len(id)-1] == ' ' {
		return fmt.Errorf("leaderelection: identity must not begin or end with a space (HTTP trims it from the blob metadata, so the stored identity would not be ours), got %s", shown(id))
	}
	return nil
}
