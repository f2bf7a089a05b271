package leaderelection

import (
	"context"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection/internal/memblob"
)

// The other writer's leaderctl calls (see sim_writers_test.go), and the
// test that its hold-backs cite the docs.

// leaderctl makes leaderctl's calls on blob, as leaderctl makes them.
func (w simWriterCall) leaderctl(ctx context.Context, kind, blob string, st memblob.BlobState) (string, error) {
	f := w.f
	if kind == "ctl-shards" {
		o, err := NewShardOwner(BlobSettings{ConnectionString: memblob.ConnectionString, Container: simContainer, Blob: simPrefix,
			ClientOptions: &azblob.ClientOptions{ClientOptions: f.svc.ClientOptions()}}, nil,
			func(context.Context, string) error { return nil }, bubbleClock(), WithLogger(f.logger("leaderctl")))
		if err != nil {
			return "", err
		}
		_, err = o.Inspect(ctx)
		return "leaderctl shards", err
	}
	mgr, err := NewBlobLeaseManager(BlobSettings{
		ConnectionString: memblob.ConnectionString, Container: simContainer, Blob: blob,
		ClientOptions: &azblob.ClientOptions{ClientOptions: f.svc.ClientOptions()},
	}, bubbleClock(), WithLogger(f.logger("leaderctl")))
	if err != nil {
		return "", nil // not a name a lease manager takes (one under .candidates/, say)
	}
	defer mgr.CloseIdleConnections()
	info, err := mgr.Inspect(ctx)
	if err != nil || kind == "ctl-status" {
		return "leaderctl status", err
	}
	switch kind {
	case "ctl-break":
		switch {
		case info.Role == RoleSession || info.Role == RoleShard:
			return "leaderctl break: refused (a ShardOwner's)", nil
		case !info.Held():
			return "leaderctl break: nothing to break", nil
		case info.Kind == ETagLease && w.intn(3) == 0:
			if why := w.breakLimit(blob, st, 0); why != "" {
				w.heldBack("leaderctl break -force", why)
				return "", nil
			}
			_, err := mgr.Break(ctx, 0)
			return "leaderctl break -force", err
		case info.Kind == ETagLease:
			_, _, err := mgr.BreakWhenSilent(ctx)
			return "leaderctl break (BreakWhenSilent)", err
		}
		period, what := ctlSafeBreakPeriod(info), "leaderctl break"
		if w.intn(3) == 0 {
			period, what = time.Duration(w.intn(61))*time.Second, "leaderctl break -period"
		}
		if why := w.breakLimit(blob, st, period); why != "" {
			// Even leaderctl's own period: it is the one the record's
			// writer declared, and the lease it breaks may be another's,
			// taken since it read the record.
			w.heldBack(what, why)
			return "", nil
		}
		_, err := mgr.Break(ctx, period)
		return what, err
	case "ctl-repair":
		election := simContainer + "/" + blob
		term, what := f.chk.MaxTerm(election), "leaderctl repair"
		if w.intn(3) == 0 && term > 1 {
			term, what = int64(w.intn(int(min(term, 1000)))), "leaderctl repair -allow-lower"
		}
		if term < f.chk.MaxTerm(election) && !*simStale {
			w.heldBack(what, simWriterLimits.staleTerm)
			return "", nil
		}
		_, err := mgr.RepairRecord(ctx, term)
		return what, err
	}
	return "", nil
}

// ctlSafeBreakPeriod is leaderctl's break period when it is given none
// (examples/leaderctl/break.go's safeBreakPeriod): the lease duration the
// holder declared in its record, or 60 s if the record is not the
// holder's (its term is pending: it has not recorded its own yet) or
// declares none. Not this manager's SafeBreakPeriod: leaderctl's manager
// has the default LeaseDuration, not the holder's.
func ctlSafeBreakPeriod(info LeaseInfo) time.Duration {
	if d := info.DeclaredDuration; d > 0 && !info.TermPending() && info.Leader.Number > 0 {
		return min(d, 60*time.Second)
	}
	return 60 * time.Second
}

// TestSimWriterHoldBacksNameTheirSections checks that each hold-back of
// the other writer cites what the docs say: a heading of docs/limits.md
// (its first quote), and phrases found in that section, or in the
// library's doc it names.
func TestSimWriterHoldBacksNameTheirSections(t *testing.T) {
	norm := func(s string) string {
		s = strings.NewReplacer("`", "", "// ", " ", "\n", " ").Replace(s)
		return strings.Join(strings.Fields(s), " ")
	}
	limits, err := os.ReadFile("docs/limits.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{} // heading -> its text, normalized
	for _, part := range strings.Split(string(limits), "\n## ")[1:] {
		heading, body, _ := strings.Cut(part, "\n")
		sections[heading] = norm(body)
	}
	v := reflect.ValueOf(simWriterLimits)
	for i := range v.NumField() {
		cite := v.Field(i).String()
		quotes := regexp.MustCompile(`"([^"]+)"`).FindAllStringSubmatch(cite, -1)
		if len(quotes) == 0 {
			t.Errorf("%s: cites nothing", cite)
			continue
		}
		if !strings.HasPrefix(cite, "limits.md ") {
			t.Errorf("%s: cites no section of docs/limits.md", cite)
			continue
		}
		text, ok := sections[quotes[0][1]]
		if !ok {
			t.Errorf("%s: docs/limits.md has no section %q", cite, quotes[0][1])
			continue
		}
		for j, q := range quotes {
			if j == 0 {
				continue // the heading
			}
			if !strings.Contains(text, q[1]) {
				t.Errorf("%s: %q is not in what it cites", cite, q[1])
			}
		}
	}
}
