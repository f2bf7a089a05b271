package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/azurite"
	"github.com/blobelect/leaderelection/internal/tools/reqcount"
)

// A fleet of quorum mutexes (leaderelection.NewQuorumMutex) over K
// accounts, each an Azurite process of its own (Config.Accounts), every
// contender behind a proxy of its own to each account. Two faults are the
// quorum's (issue 39):
//
//   - FaultAccountDown: one account's Azurite SIGKILLed, kept down for
//     Config.AccountDown, and started again on its port (its data on disk,
//     less what it had not saved). A majority still answers: the leader
//     must lead through it, with no handover and its func not cancelled
//     (QuorumFailures). A fleet over one account (the library's mutex, or
//     the reference sample's) takes the same fault beside it, its only
//     account down: it stops leading (quorumbench's outage trial).
//   - FaultCutMajority: the leader's proxies to a majority of the accounts
//     drop everything, past the lease, as FaultBlackhole does to one
//     account's; it still reaches the others. Its func must return at
//     least StopMargin before its lease on a majority could pass to
//     another, by the checker's own account: each account's last
//     confirmed acquire or renewal from the contender's requests, the
//     majority-th latest of them (quorumClock).
const (
	FaultAccountDown = "account-down"
	FaultCutMajority = "cut-majority"
)

// QuorumFaults are the faults a quorum fleet adds to AllFaults.
var QuorumFaults = []string{FaultAccountDown, FaultCutMajority}

// defaultAccountDown is how long FaultAccountDown lasts by default: the
// issue's trial.
const defaultAccountDown = 2 * time.Minute

// accountName is base for the first account, base-i for account i.
func accountName(base string, i int) string {
	if i == 0 {
		return base
	}
	return fmt.Sprintf("%s-%d", base, i)
}

// checkQuorum refuses a configuration a quorum fleet cannot run, or a
// quorum fault without one.
func (c Config) checkQuorum() error {
	quorum := c.Accounts > 1
	if c.Accounts != 0 && c.Accounts != 1 && c.Accounts != 3 && c.Accounts != 5 {
		return fmt.Errorf("chaos: Accounts must be 1, 3 or 5, got %d", c.Accounts)
	}
	for _, k := range append(slices.Clone(c.Kinds), c.Sequence...) {
		if k == FaultCutMajority && !quorum {
			return fmt.Errorf("chaos: %s needs a quorum fleet (Accounts 3 or 5)", k)
		}
		if etcd, _ := etcdFleet(c.Fleet); k == FaultAccountDown && etcd {
			return fmt.Errorf("chaos: %s kills an Azurite: not with a fleet on etcd", k)
		}
	}
	if !quorum {
		return nil
	}
	if c.writes() {
		return errors.New("chaos: the messy world's faults write one account's blob: not with a quorum fleet")
	}
	for _, f := range c.Fleet {
		if f.Algo != AlgoLibrary && f.Algo != "" {
			return fmt.Errorf("chaos: a quorum fleet runs the library's mutex only, not %s", f.Algo)
		}
		if t, err := f.timings(); err == nil && t.Kind != leaderelection.NativeLease {
			return fmt.Errorf("chaos: a quorum takes native leases (15 s to 60 s), not %s", f.Label())
		}
	}
	return nil
}

// injectQuorum applies a quorum fault to the fleet led by lane l; u picks
// the account (FaultAccountDown) or the one left reachable
// (FaultCutMajority).
func (h *harness) injectQuorum(ctx context.Context, kind string, u float64, l *lane, hold time.Duration) (bool, error) {
	k := len(l.proxies)
	pick := int(u * float64(k))
	switch kind {
	case FaultAccountDown:
		servers := append([]*azurite.Server{h.store.(*azurite.Server)}, h.more...)
		srv := servers[pick]
		hold = h.cfg.AccountDown
		if hold == 0 {
			hold = defaultAccountDown
		}
		bound := h.timings.LeaseDuration + h.timings.RetryInterval + h.timings.Slack
		if k > 1 {
			if _, ok := h.log.Wait(ctx, bound, func() bool { return h.holdsAll(l.name) }); !ok {
				h.progress("%s does not hold every account; %s held back", l.name, kind)
				return false, nil
			}
		}
		// Azurite saves its data every few seconds: the term's record,
		// written as the term began, is on disk before the kill.
		Sleep(ctx, h.ledSince(l.name)+savedAfter-time.Duration(Mono()))
		// Target is the leader: the checker asks whether its term moved.
		h.note(KindFault, kind, l.name, fmt.Sprintf("account %d SIGKILLed for %v", pick, hold))
		if err := syscall.Kill(srv.PID(), syscall.SIGKILL); err != nil {
			return false, fmt.Errorf("chaos: killing account %d's Azurite: %w", pick, err)
		}
		<-srv.Done()
		Sleep(ctx, hold)
		for attempt := 1; ; attempt++ {
			err := srv.Restart(ctx)
			if err == nil {
				break
			}
			if attempt == 3 || ctx.Err() != nil {
				return false, fmt.Errorf("chaos: restarting account %d: %w", pick, err)
			}
			h.progress("restarting account %d: %v; trying again", pick, err)
		}
		h.note(KindHeal, kind, l.name, "")
		if k == 1 {
			return true, nil // the run's loop waits for a leader again
		}
		restarted := time.Now()
		if _, ok := h.log.Wait(ctx, bound, func() bool { return h.holdsAll(l.name) }); ok {
			took := time.Since(restarted).Round(time.Millisecond)
			h.note(KindRegained, kind, l.name, took.String())
			h.progress("%s holds every account again %v after the restart", l.name, took)
		} else {
			h.progress("%s does not hold every account %v after the restart", l.name, bound)
		}
		return true, nil
	case FaultCutMajority:
		// A bare majority cut, the accounts after pick: it still reaches
		// pick (and, of 5, one more).
		h.note(KindFault, kind, l.name, fmt.Sprintf("cut from %d of %d accounts, not account %d; hold %v", k/2+1, k, pick, hold.Round(time.Millisecond)))
		var undo []func()
		for i := 1; i <= k/2+1; i++ {
			p := l.proxies[(pick+i)%k]
			names, err := addToxics(p, FaultBlackhole)
			for _, n := range names {
				undo = append(undo, func() { _ = p.Toxics.RemoveToxic(context.Background(), n) })
			}
			if err != nil {
				return false, err
			}
		}
		Sleep(ctx, hold)
		for _, f := range undo {
			f()
		}
		h.note(KindHeal, kind, l.name, "")
		return true, nil
	}
	return false, fmt.Errorf("chaos: unknown quorum fault %q", kind)
}

// quorumContender builds a contender's quorum mutex over cfg.BlobURLs, s
// its settings but for the account, each account's client with the shared
// transport and request counter and a leaseClock of its own.
func quorumContender(cfg contenderConfig, s leaderelection.BlobSettings, tr http.RoundTripper, counter *reqcount.Policy,
	task func(context.Context) error, opts []leaderelection.Option) (*leaderelection.BlobDistributedMutex, *quorumClock, error) {
	eff, err := cfg.Contender.timings()
	if err != nil {
		return nil, nil, err
	}
	q := &quorumClock{need: len(cfg.BlobURLs)/2 + 1, d: eff.LeaseDuration}
	var accounts []leaderelection.BlobSettings
	for _, u := range cfg.BlobURLs {
		c, n := &leaseClock{d: eff.LeaseDuration}, &reqcount.Policy{}
		q.accounts, q.counts = append(q.accounts, c), append(q.counts, n)
		a := s
		a.ConnectionString = azurite.ConnectionStringFor(u)
		a.ClientOptions = &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{
			Transport: &http.Client{Transport: tr}, PerRetryPolicies: []policy.Policy{counter, n, c}}}
		accounts = append(accounts, a)
	}
	m, err := leaderelection.NewQuorumMutex(accounts, task, opts...)
	return m, q, err
}

// quorumClock is the checker's account of when a quorum lease could pass:
// each account's leaseClock, and the majority-th latest of their last
// confirmed extensions (quorum.go's Q1 in the library, from the requests,
// not its word). An account never extended counts as the earliest.
type quorumClock struct {
	accounts []*leaseClock
	counts   []*reqcount.Policy // the requests to each account
	need     int
	d        time.Duration
}

// requests is how many requests went to each account.
func (q *quorumClock) requests() []int64 {
	var n []int64
	for _, c := range q.counts {
		n = append(n, c.Counts().Total())
	}
	return n
}

func (q *quorumClock) couldExpire() int64 {
	var last []int64
	for _, c := range q.accounts {
		last = append(last, c.last.Load())
	}
	slices.Sort(last)
	slices.Reverse(last)
	if at := last[q.need-1]; at != 0 {
		return at + int64(q.d)
	}
	return 0
}

// QuorumFailures judges a run's quorum faults (issue 39) from its report
// and records: after FaultAccountDown the leader's term did not move, its
// func was not cancelled, and it held every account again soon after the
// restart (KindRegained); after FaultCutMajority leadership moved, and the cut-off
// leader's func returned at least margin before its lease on a majority
// could pass, by the contender's own requests (less slack, the time to
// deliver a cancelled context on a loaded machine). It returns one line
// per failure.
func QuorumFailures(rep Report, recs []Record, margin, slack time.Duration) []string {
	var bad []string
	for _, f := range rep.Faults {
		switch f.Kind {
		case FaultAccountDown:
			regained := slices.ContainsFunc(recs, func(r Record) bool {
				return r.Kind == KindRegained && r.Target == f.Target && r.Mono >= f.Healed
			})
			switch {
			case f.LeaderAt == "":
				bad = append(bad, fmt.Sprintf("%s at %s: nobody led as it began", f.Kind, f.Target))
			case f.Changed:
				bad = append(bad, fmt.Sprintf("%s: %s's term moved (a handover or its func cancelled)", f.Kind, f.LeaderAt))
			case !regained:
				bad = append(bad, fmt.Sprintf("%s: %s did not hold every account again soon after the restart", f.Kind, f.LeaderAt))
			}
		case FaultCutMajority:
			switch {
			case !f.Changed:
				bad = append(bad, fmt.Sprintf("%s: %s led on, cut off from a majority", f.Kind, f.LeaderAt))
			case !f.StopMarginOK:
				bad = append(bad, fmt.Sprintf("%s: %s's stop margin is unknown", f.Kind, f.LeaderAt))
			case f.StopMargin < margin-slack:
				bad = append(bad, fmt.Sprintf("%s: %s stopped %v before its majority could pass, under StopMargin %v", f.Kind, f.LeaderAt, f.StopMargin, margin))
			}
		}
	}
	return bad
}

// QuorumSlack is what QuorumFailures allows below StopMargin: the time to
// deliver a cancelled context and stamp the func's end on a loaded machine
// (shardchaos allows the same).
const QuorumSlack = 250 * time.Millisecond

// StopMarginOf is the least StopMargin of a fleet's contenders, defaults
// applied.
func StopMarginOf(fleet []Contender) (time.Duration, error) {
	var least time.Duration
	for i, c := range fleet {
		t, err := c.timings()
		if err != nil {
			return 0, err
		}
		if i == 0 || t.StopMargin < least {
			least = t.StopMargin
		}
	}
	return least, nil
}

// heldEvery is how often a quorum contender looks at the accounts it holds.
const heldEvery = 200 * time.Millisecond

// heldAll is KindHeld's Detail when the leader holds every account.
const heldAll = "all"

// watchHeld returns a poll that records, while m leads, each change of
// what it holds: every account, or what Degraded says it does not (up to
// the first account's failure).
func watchHeld(m *leaderelection.BlobDistributedMutex, rec interface{ Write(Record) }) func() {
	last := ""
	return func() {
		now := ""
		if m.IsLeader() {
			now = heldAll
			if err := m.Degraded(); err != nil {
				// How many it holds and which not, without each
				// failure's text, which changes with every try.
				now, _, _ = strings.Cut(err.Error(), " (")
			}
		}
		if now != last && now != "" {
			rec.Write(Record{Kind: KindHeld, Detail: now})
		}
		last = now
	}
}

// savedAfter is how long after a term's start FaultAccountDown waits:
// Azurite saves its database every 5 s (azurite.Server.PID).
const savedAfter = 6 * time.Second

// ledSince is the start (CLOCK_MONOTONIC ns, as a duration) of lane who's
// running term; 0 if none.
func (h *harness) ledSince(who string) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Duration(h.open[who])
}

// holdsAll reports whether lane who leads holding every account.
func (h *harness) holdsAll(who string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.whole[who]
}

// SteadyRequests returns, for each contender of a steady run (no fault),
// its first and last request counts (KindRequests records) from 10 s after
// the first leader started until 2 s before the run, or that leader's term,
// ended: the window the request benchmarks count over. It fails if nobody
// led.
func SteadyRequests(rep Report, recs []Record) (leader string, first, last map[string]Record, err error) {
	if len(rep.Terms) == 0 {
		return "", nil, nil, errors.New("nobody led in the steady run")
	}
	lead := rep.Terms[0]
	from, to := lead.Start+int64(10*time.Second), rep.End-int64(2*time.Second)
	if lead.End != 0 {
		to = min(to, lead.End)
	}
	first, last = map[string]Record{}, map[string]Record{}
	for _, r := range recs {
		if r.Kind != KindRequests || r.Mono < from || r.Mono > to {
			continue
		}
		if _, ok := first[r.Who]; !ok {
			first[r.Who] = r
		}
		last[r.Who] = r
	}
	return lead.Who, first, last, nil
}
