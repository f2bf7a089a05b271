package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// A mutex over a quorum of accounts (quorum.go holds the lease and its
// argument): the same term engine, and a contention loop of its own, as it
// looks at K blobs, not one.

// NewQuorumMutex returns a mutex that runs fn while it holds the lease on a
// majority of accounts: one BlobSettings per account, 3 or 5 of them, each
// naming its own source (a connection string, a service URL with its
// credential...), container and blob, on distinct blobs. Their timings are
// shared: LeaseDuration (a native lease, whole seconds from 15 s to 60 s),
// RenewInterval, RetryInterval, StopMargin and RequestTimeout must be the
// same on every account, defaults applied. Every invalid setting is
// reported, naming its account (accounts[i]). No network call is made.
//
// The mutex leads, and its func runs, as [NewBlobDistributedMutex]'s do,
// with the same options. With [WithLeaseIDFile], one file names the lease
// ID proposed on every account, and a leader restarted in place takes back
// every account it held that answers. With [WithPriority], every account's
// record declares the priority, and the candidates' blobs are kept beside
// one account's blob only, the same whatever order a contender lists the
// accounts in: the least by container URL (scheme and host in lower case)
// and "/" and blob name. Every contender must name that account by the
// same URL. While that account is down, nobody stands as a candidate and
// no lease is handed over: the leader leads on until it stops for another
// reason, and then leadership moves as without priorities. An account
// down, slow or refusing moves nothing while the others are a majority: the
// leader keeps leading, and takes that account's lease back when it answers
// again.
// [BlobDistributedMutex.LeaseManager] returns the first account's manager;
// [BlobDistributedMutex.Leader] reads every account; see
// [BlobDistributedMutex.Degraded]. The guarantee, and what it costs:
// docs/quorum.md.
func NewQuorumMutex(accounts []BlobSettings, fn func(ctx context.Context) error, opts ...Option) (*BlobDistributedMutex, error) {
	var errs []error
	if fn == nil {
		errs = append(errs, errors.New("leaderelection: the leader func is nil"))
	}
	o := buildOptions(opts)
	if err := checkIdentity(o.identity); err != nil {
		errs = append(errs, err)
	}
	q, err := newQuorumLease(accounts, opts...)
	if err != nil {
		errs = append(errs, err)
	} else if renew := q.settings.RenewInterval; o.stallTimeout != 0 && o.stallTimeout < renew {
		errs = append(errs, fmt.Errorf("leaderelection: stall timeout must be 0 (off) or at least RenewInterval (%v), got %v", renew, o.stallTimeout))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	s := q.settings
	m := &BlobDistributedMutex{lease: q.accounts[0], quorum: q, fn: fn, logger: q.logger, opts: o, instance: uuid.NewString()[:8]}
	m.term = &termRunner{lease: q, logger: q.logger, metrics: newMetrics(o.meterProvider, s.Container, s.Blob),
		identity: o.identity, stall: o.stallTimeout, emit: m.emit, kind: runsLeader,
		hooks: termHooks{started: func(t Term) { m.observed = max(m.observed, t.Number) }}}
	if o.prioritySet {
		// As for one account (prefer.go): every account's record declares
		// the priority, and names the contender an ended term hands to; the
		// leader watches the candidates beside one account's blob
		// (besideLease).
		for _, a := range q.accounts {
			a.extraMetadata = m.preferMetadata
		}
		m.term.hooks.whileLeading = func(ctx context.Context, pleaseStop context.CancelCauseFunc) {
			m.watchCandidates(ctx, pleaseStop, m.passedOver)
		}
	}
	return m, nil
}

// runQuorum is RunTaskWhenMutexAcquired for a quorum mutex: each turn it
// reads every account, and tries for the lease when a majority is free
// (quorum.go's Q2: a minority taken is given back at once). With a lease ID
// file, its first try is on every account that answered, held or not: a
// lease its previous process held is taken back (Q4).
func (m *BlobDistributedMutex) runQuorum(ctx context.Context) error {
	q := m.quorum
	defer q.closeIdle()
	defer m.term.metrics.observeLeading(m.term.leading.Load)()
	defer m.observeAccounts()()
	defer func() {
		if m.candidate.lease != "" {
			end, cancel := m.term.endWindow(ctx)
			defer cancel()
			m.withdraw(end, &m.candidate) // not to be handed a lease it will not take
		}
	}()
	s := q.settings
	m.logger.Info("leaderelection: contending for leadership", append([]any{"container", s.Container, "blob", s.Blob,
		"identity", m.opts.identity, "leaseDuration", s.LeaseDuration}, q.kindAttrs()...)...)
	var (
		failing    failureLog
		backoff    = s.RetryInterval
		wait       time.Duration
		standAside bool // deposed: let the lease go free once without taking it
		resume     = m.opts.leaseIDFileSet
	)
	for clock.Sleep(ctx, wait) {
		wait = clock.Jitter(s.RetryInterval)
		try, left, handedTo, err := m.lookQuorum(ctx, resume, &wait)
		switch {
		case ctx.Err() != nil:
			continue
		case err != nil:
			if err := m.quorumFailed(err, &failing, &wait, &backoff); err != nil {
				return err
			}
			continue
		case count(try) < q.need:
			if left > 0 {
				wait = min(wait, left)
			}
			continue
		case standAside:
			standAside = false
			wait = clock.Behind(s.RetryInterval)
			continue
		}
		// A minority taken, or an answer lost, is given back by acquire
		// itself, within one RequestTimeout of a cancel.
		g, err := q.acquire(ctx, try)
		m.term.metrics.attempt(outcome(err, "acquired"))
		resume = false // taken back, or moved on to a fresh ID by the give-back
		switch {
		case err == nil:
			failing.recovered(m.logger, "leaderelection: storage reachable again", "container", s.Container, "blob", s.Blob)
			backoff = s.RetryInterval
			m.candidate.lease = "" // its candidacy, if it stood, lapses by itself
			m.passedOver = handedTo
			if ctx.Err() != nil {
				end, cancel := m.term.endWindow(ctx) // won just as the caller gave up
				m.term.releaseQuietly(end, true)
				cancel()
				continue
			}
			m.handTo.Store(nil)
			reason, err := m.term.run(ctx, g, m.fn)
			if err != nil {
				return err
			}
			standAside = reason == ReasonLeaseLost || reason == ReasonStalled || reason == ReasonDeadline
			wait = clock.Behind(s.RetryInterval)
		case ctx.Err() != nil:
		case errors.Is(err, ErrLeaseHeld):
			backoff = s.RetryInterval
			m.logger.Debug("leaderelection: could not take a majority of accounts", "container", s.Container, "blob", s.Blob, "error", err)
		default:
			if err := m.quorumFailed(err, &failing, &wait, &backoff); err != nil {
				return err
			}
		}
	}
	return ctx.Err()
}

// quorumFailed handles a read or an acquire that no majority of accounts
// answered: an error matching ErrPermanent (so many accounts refuse for
// good that no majority can answer) ends the contention, returned;
// anything else is logged (rate-limited) and retried with backoff.
func (m *BlobDistributedMutex) quorumFailed(err error, failing *failureLog, wait, backoff *time.Duration) error {
	s := m.quorum.settings
	if errors.Is(err, ErrPermanent) {
		m.logger.Error("leaderelection: giving up: storage refused the lease request on too many accounts for a majority", "container", s.Container, "blob", s.Blob, "error", err)
		return err
	}
	failing.failed(m.logger, "leaderelection: cannot reach a majority of accounts; retrying with backoff", "container", s.Container, "blob", s.Blob, "error", err)
	*wait = clock.Jitter(*backoff)
	*backoff = min(2**backoff, max(s.RetryInterval, s.LeaseDuration))
	return nil
}

// lookQuorum reads every account's lease, notes who leads, and does a
// contender's part on each blob created again (seedFresh), and on a
// preferred leader (prefer.go: it stands as a candidate, and leaves a lease
// handed to another). It returns the accounts whose lease may be taken now
// (free, settled, of this role; resuming, held too: Q4), and, if they are
// fewer than a majority, how soon a blob still settling may be, or a lease
// handed to another free to take; and whom the lease was handed to.
func (m *BlobDistributedMutex) lookQuorum(ctx context.Context, resume bool, wait *time.Duration) (free []bool, left time.Duration, handedTo string, err error) {
	q := m.quorum
	infos, errs := q.inspect(ctx)
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if answered < q.need {
		return nil, 0, "", q.shortOf("read lease", answered, errs)
	}
	free = make([]bool, len(infos))
	loose := 0                // accounts free, of those
	var lead, ended LeaseInfo // the term running, and the last ended, of those read
	for i, info := range infos {
		if errs[i] != nil {
			continue
		}
		a := q.accounts[i]
		if info.Held() && !info.TermPending() && info.Leader.Number > lead.Leader.Number {
			lead = info
		}
		if !info.Held() && endedLater(info, ended) {
			ended = info
		}
		if a.recordProblem(info).blocks() {
			continue
		}
		if info.Held() {
			free[i] = resume // perhaps under our ID, the file's: an acquire says
			continue
		}
		if wait := a.seedFresh(ctx, info); wait > 0 {
			left = max(left, wait)
			continue
		}
		free[i] = true
		loose++
	}
	if lead.Leader.Number > m.observed && lead.Leader.Identity != m.opts.identity {
		m.observed = lead.Leader.Number
		s := q.settings
		m.logger.Info("leaderelection: following the leader", "container", s.Container, "blob", s.Blob,
			"leader", lead.Leader.Identity, "term", lead.Leader.Number, "since", lead.Leader.Since, "identity", m.opts.identity)
		m.emit(Event{Kind: NewLeaderObserved, Term: lead.Leader})
	}
	m.stand(ctx, lead, wait)
	// A lease handed to another is left to it from the first look that
	// finds a majority free (no contender can take it before: a handover
	// whose releases landed on a minority frees the rest a lease later),
	// by a process resuming from its lease ID file too (its predecessor's
	// handover stands).
	if loose >= q.need {
		if d, ok := m.deferTo(ended); ok {
			return make([]bool, len(infos)), max(left, d), ended.HandedTo, nil
		}
	}
	return free, left, ended.HandedTo, nil
}

// endedLater reports whether a free account's read, info, says more of the
// last ended term than ended, the best of the others so far: a higher term,
// or the same one marked ended and handed to a contender (the least such
// name if two differ). The choice depends neither on the order the accounts
// are given in nor on the order they answer in; and the wait for a handover
// is timed on the handover itself, which every account that carries its
// mark shows alike, so that looks that read different accounts time one
// wait (deferTo, Q5).
func endedLater(info, ended LeaseInfo) bool {
	if info.Leader.Number != ended.Leader.Number {
		return info.Leader.Number > ended.Leader.Number
	}
	handed := func(i LeaseInfo) bool { return i.HandedTo != "" && !i.LeaderEnded.IsZero() }
	switch {
	case handed(info) != handed(ended):
		return handed(info)
	case handed(info):
		return info.HandedTo < ended.HandedTo
	}
	return false
}

// count is how many of bs are true.
func count(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// Degraded reports nil unless this is a quorum mutex (see [NewQuorumMutex])
// that leads on fewer than all its accounts: then an error naming each
// account it does not hold and the last failure there. A degraded leader is
// healthy (see [BlobDistributedMutex.Healthy]): it leads on a majority, and
// one more account lost would stop it. It makes no network call.
func (m *BlobDistributedMutex) Degraded() error {
	if m.quorum == nil || !m.term.leading.Load() {
		return nil
	}
	return m.quorum.degraded()
}

// leader is Leader for a quorum mutex: every account read, the lease
// with the highest term of those held, or, if none is held, of all read.
func (q *quorumLease) leader(ctx context.Context) (LeaseInfo, error) {
	infos, errs := q.inspect(ctx)
	var best LeaseInfo
	found, read := false, 0
	for i, info := range infos {
		if errs[i] != nil {
			continue
		}
		read++
		better := info.Leader.Number > best.Leader.Number
		if !found || info.Held() && (!best.Held() || better) || !best.Held() && !info.Held() && better {
			best, found = info, true
		}
	}
	if read < q.need {
		return best, q.shortOf("read lease", read, errs)
	}
	return best, nil
}

// degraded names the accounts a leader does not hold, and why.
func (q *quorumLease) degraded() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var missing []string
	now := time.Now()
	for i, st := range q.state {
		if !st.holds(now) {
			why := "not taken yet"
			if st.lastErr != nil {
				why = st.lastErr.Error()
			}
			missing = append(missing, fmt.Sprintf("accounts[%d] (%s)", i, why))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("leaderelection: leading on %d of %d accounts; not held: %s", len(q.state)-len(missing), len(q.state), strings.Join(missing, "; "))
}

// observeAccounts registers, for the life of one RunTaskWhenMutexAcquired
// call, the gauges of each account a leader holds the lease on (attribute
// leaderelection.account, its index), observed while it leads:
//
//	leaderelection.quorum.account.held        gauge     1 while this leader surely holds the account's lease, else 0
//	leaderelection.quorum.account.renew.age   gauge, s  seconds since the send time of its last confirmed acquire or renewal there
//	leaderelection.quorum.account.failures    gauge     its requests that failed in a row
func (m *BlobDistributedMutex) observeAccounts() func() {
	mt := m.term.metrics
	held, _ := mt.meter.Int64ObservableGauge("leaderelection.quorum.account.held",
		metric.WithDescription("1 while this quorum mutex's leader surely holds the account's lease, else 0; observed while it leads."))
	age, _ := mt.meter.Float64ObservableGauge("leaderelection.quorum.account.renew.age", metric.WithUnit("s"),
		metric.WithDescription("Time since the send time of the last confirmed acquire or renewal of the account's lease; observed while it leads."))
	failures, _ := mt.meter.Int64ObservableGauge("leaderelection.quorum.account.failures",
		metric.WithDescription("The leader's requests to the account that failed in a row; observed while it leads."))
	reg, err := mt.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if !m.term.leading.Load() {
			return nil
		}
		now := time.Now()
		for i, st := range m.quorum.snapshot() {
			at := mt.with(attribute.Int("leaderelection.account", i))
			v := int64(0)
			if st.holds(now) {
				v = 1
			}
			o.ObserveInt64(held, v, at)
			if st.held {
				o.ObserveFloat64(age, now.Sub(st.last.Sent).Seconds(), at)
			}
			o.ObserveInt64(failures, int64(st.failing), at)
		}
		return nil
	}, held, age, failures)
	if err != nil {
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}
