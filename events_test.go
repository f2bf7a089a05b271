package leaderelection

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// An event printed or logged, with any verb, says what happened, to which
// term and when, and never shows the lease ID: whoever has it can act as
// the holder.
func TestEventPrintsWithoutTheLeaseID(t *testing.T) {
	const leaseID = "5f0c6a53-8c1d-4d8e-9a57-3b1f0e2d7c44"
	since := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	returned := time.Now()
	e := Event{
		Kind:         StoppedLeading,
		Term:         Term{Number: 42, Identity: "pod-a", LeaseID: leaseID, Since: since},
		Reason:       ReasonFuncReturned,
		Err:          errors.New("boom"),
		At:           returned,
		FuncReturned: returned,
		LeaseExpiry:  returned.Add(2500 * time.Millisecond),
		Shard:        "tenant-1",
		Session:      "session-1",
	}
	want := `Event{stopped leading Term:42 Identity:"pod-a" Since:2025-03-01T12:00:00Z Shard:"tenant-1" Session:session-1 Reason:"func returned" Err:"boom" ` +
		"At:" + returned.Format(time.RFC3339Nano) + " FuncReturned:" + returned.Format(time.RFC3339Nano) +
		" LeaseExpiry:" + returned.Add(2500*time.Millisecond).Format(time.RFC3339Nano) + " Margin:2.5s}"
	assert.Equal(t, want, e.String())
	assert.NotContains(t, e.String(), "m=+", "no monotonic reading")

	var text, js strings.Builder
	slog.New(slog.NewTextHandler(&text, nil)).Info("event", "e", e)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("event", "e", e)
	described := []string{text.String(), js.String(), fmt.Sprint(e), fmt.Sprint(&e), fmt.Sprintf("%+v", struct{ E Event }{e})}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%d", "%x"} {
		described = append(described, fmt.Sprintf(verb, e))
	}
	for _, out := range described {
		assert.NotContains(t, out, leaseID)
		assert.NotContains(t, out, strings.ToUpper(leaseID))
	}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		assert.Equal(t, want, fmt.Sprintf(verb, e), verb)
	}
	assert.Contains(t, text.String(), "Term:42")
	assert.Contains(t, js.String(), "Term:42")

	// An observed leader's event: only what is set is shown.
	observed := Event{Kind: SilentLeaseBroken, Term: Term{Number: 7, Identity: "pod-b"}, Silence: 15 * time.Second}
	assert.Equal(t, `Event{silent lease broken Term:7 Identity:"pod-b" Silence:15s}`, observed.String())
}

func TestTermPrintsWithoutTheLeaseID(t *testing.T) {
	const leaseID = "5f0c6a53-8c1d-4d8e-9a57-3b1f0e2d7c44"
	term := Term{Number: 42, Identity: "pod-a", LeaseID: leaseID, Since: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)}
	assert.Equal(t, `Term{42 Identity:"pod-a" Since:2025-03-01T12:00:00Z}`, term.String())
	var text, js strings.Builder
	slog.New(slog.NewTextHandler(&text, nil)).Info("term", "t", term)
	slog.New(slog.NewJSONHandler(&js, nil)).Info("term", "t", term)
	for _, s := range []string{fmt.Sprint(term), fmt.Sprintf("%v %+v %#v %s %q", term, term, term, term, term), fmt.Sprintf("%v", &term), text.String(), js.String()} {
		assert.NotContains(t, s, leaseID)
		assert.Contains(t, s, "pod-a")
	}
}
