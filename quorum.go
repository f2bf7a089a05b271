package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A quorum lease: the lease on one blob in each of K storage accounts (3 or
// 5), held while a majority of them is, so that an account's outage, or a
// region's, moves nothing. Each account's lease is a BlobLeaseManager's, as
// for one account; what follows is what the quorum adds to the argument at
// the top of renew.go.
//
// Q1. No two funcs at once. A contender leads only while it holds the lease
// on a majority, Q = floor(K/2) + 1, of the accounts. For each account it
// holds, the lease there cannot pass before S_i + D, S_i the send time of
// its last confirmed acquire or renewal there (renew.go). Sort those
// moments, latest first: until the Q-th of them, at least Q accounts are
// surely still its own. Its fuse is set from that Q-th latest S_i (grant),
// less StopMargin, on both clocks, read when that request was sent; a round
// of renewals extends the term only when it moved that Q-th latest. Any
// other contender needs a majority too, and two majorities of K share an
// account: that account's lease is this holder's until its S_i + D, no
// earlier than the Q-th latest, so the other cannot hold it, nor a
// majority, before this holder's func has stopped, StopMargin before. Its
// own deadline needs no account to answer: a leader cut off from all
// accounts, or from all but a minority, stops at the deadline the last Q
// confirmations set. Every account has the same LeaseDuration (checked): D
// is one number. An account whose server says the lease is no longer ours
// (its container deleted, a break by hand) leaves the set before its
// S_i + D: if that brings the Q-th latest of the rest below the one the fuse
// was last set from, or leaves fewer than Q, the term stops at once
// (renewed), rather than trust the lost account's S_i. (A deleted
// container's blob created again is also waited for before any contender
// records a term on it: recreated.go.)
//
// Q2. A contender that takes a minority gives it back at once, and tries
// again after a jittered RetryInterval (the mutex's loop): contenders that
// split the accounts between them all let go, and the next to try takes
// every free account. Leading needs no order of accounts; no election waits
// for one account to answer after a majority has (an account down costs a
// RequestTimeout per round, spent beside the others).
//
// Q3. Terms. A new leader reads the record on every account it holds (a
// majority, which shares an account with every earlier leader's majority
// that stored its term), takes 1 + the highest term it read there, or that
// this instance saw on any of them (each account's floor), writes it, If-Match
// the ETag it read, on every account it holds, and starts its func only once
// a majority has stored it (recordTerm). While it leads, it takes back an
// account it does not hold at each renewal, and writes its term there too
// (retake), so that its term ends on every account it can reach. A term
// stored on s accounts is read by any later majority unless every account of
// that majority that stored it lost its data (a container deleted and
// created again before any running instance saw it, an account failed over
// to a stale copy, a restore): more than Q + s - K - 1 of them. With s = K
// (every account reached) that is Q - 1 accounts: 1 of 3, 2 of 5; with s = Q
// (a minority unreachable the whole term), none. Each account's blob created
// again under a running fleet is still waited for and raised above every
// term its instances saw there (recreated.go), as for one account: an
// account not settled counts for no majority until it is.
//
// Only native leases (15 to 60 s): an ETag lease's followers must time each
// account's silence, which this quorum does not do. A ShardOwner runs over
// one account.

// QuorumSizes are the numbers of accounts a quorum mutex leads over.
var quorumSizes = []int{3, 5}

// quorumLease is the lease on a majority of accounts (see above); the term
// engine runs its terms as it runs one blob's (termLease).
type quorumLease struct {
	accounts []*BlobLeaseManager // in the order given
	settings BlobSettings        // the first account's: the timings are every account's
	need     int                 // a majority
	logger   *slog.Logger

	mu       sync.Mutex
	state    []accountLease
	term     Term  // the running term, once recorded (Number 0: none)
	extended Grant // the last grant returned: a renewal returns one only if later
}

// accountLease is what a quorum lease knows of one account's lease.
type accountLease struct {
	held     bool  // taken, by a confirmed acquire or renewal, and not since known lost or given back
	last     Grant // its last confirmed acquire or renewal
	recorded bool  // the running term is stored there
	failing  int   // requests failed in a row
	lastErr  error // the last failure
	down     bool  // said not held (noteHeld)
}

// holds reports whether the lease is surely still ours at now: taken, not
// known lost, and not past its last confirmed grant (an account that stopped
// answering is held in name until then).
func (st accountLease) holds(now time.Time) bool { return st.held && now.Before(st.last.Expires) }

// newQuorumLease builds a manager for each account, after checking that
// they are K of quorumSizes, each valid, distinct, on a native lease, and
// timed alike.
func newQuorumLease(accounts []BlobSettings, opts ...Option) (*quorumLease, error) {
	if !slices.Contains(quorumSizes, len(accounts)) {
		return nil, fmt.Errorf("leaderelection: a quorum mutex leads over 3 or 5 accounts, got %d", len(accounts))
	}
	var errs []error
	for i, s := range accounts {
		if err := s.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("accounts[%d]: %w", i, err))
			continue
		}
		if err := checkOwnName(s.Blob, false); err != nil {
			errs = append(errs, fmt.Errorf("accounts[%d]: %w", i, err))
			continue
		}
		d := s.withDefaults()
		if d.kind() != NativeLease {
			errs = append(errs, &SettingsError{Field: fmt.Sprintf("LeaseDuration of accounts[%d]", i),
				Rule: fmt.Sprintf("a quorum takes a native lease on each account, whole seconds from 15 s to 60 s, got %v", d.LeaseDuration)})
		}
		errs = append(errs, sameTimings(i, d, accounts[0].withDefaults())...)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	q := &quorumLease{need: len(accounts)/2 + 1, state: make([]accountLease, len(accounts))}
	where := map[string]int{}
	for i, s := range accounts {
		m, err := NewBlobLeaseManager(s, opts...)
		if err != nil {
			return nil, fmt.Errorf("accounts[%d]: %w", i, err)
		}
		m.waitForBlobsCreatedAgain()
		at := m.containerClient.Where() + "/" + s.Blob
		if j, ok := where[at]; ok {
			return nil, fmt.Errorf("leaderelection: accounts[%d] and accounts[%d] name the same blob: a quorum needs a blob on each of %d accounts", j, i, len(accounts))
		}
		where[at] = i
		q.accounts = append(q.accounts, m)
	}
	q.settings, q.logger = q.accounts[0].settings, q.accounts[0].logger
	return q, nil
}

// sameTimings reports each timing of s, account i's with defaults, that
// differs from first's: a quorum's accounts share them.
func sameTimings(i int, s, first BlobSettings) []error {
	var errs []error
	for _, f := range []struct {
		name      string
		got, want time.Duration
	}{
		{"LeaseDuration", s.LeaseDuration, first.LeaseDuration},
		{"RenewInterval", s.RenewInterval, first.RenewInterval},
		{"RetryInterval", s.RetryInterval, first.RetryInterval},
		{"StopMargin", s.StopMargin, first.StopMargin},
		{"RequestTimeout", s.RequestTimeout, first.RequestTimeout},
	} {
		if f.got != f.want {
			errs = append(errs, &SettingsError{Field: fmt.Sprintf("%s of accounts[%d]", f.name, i),
				Rule: fmt.Sprintf("a quorum's accounts share their timings: %v here, %v on accounts[0]", f.got, f.want)})
		}
	}
	return errs
}

// The term engine's view (termLease).
func (q *quorumLease) config() BlobSettings  { return q.settings }
func (q *quorumLease) bootClock() clock.Boot { return q.accounts[0].boot }
func (q *quorumLease) Kind() LeaseKind       { return NativeLease }
func (q *quorumLease) kindAttrs() []any {
	return []any{"lease", NativeLease, "quorum", fmt.Sprintf("%d of %d accounts", q.need, len(q.accounts))}
}

// each runs f for every account at once, and returns when all have.
func (q *quorumLease) each(f func(i int, a *BlobLeaseManager)) {
	var wg sync.WaitGroup
	for i, a := range q.accounts {
		wg.Go(func() { f(i, a) })
	}
	wg.Wait()
}

// where names account i in logs: its index, container and blob.
func (q *quorumLease) where(i int) []any {
	a := q.accounts[i]
	return []any{"account", i, "container", a.container, "blob", a.blob}
}

// grantLocked is the grant the majority's leases last until: the Q-th
// latest of the held accounts' last confirmed grants (see Q1), and false if
// fewer than Q are held.
func (q *quorumLease) grantLocked() (Grant, bool) {
	var gs []Grant
	for _, st := range q.state {
		if st.held {
			gs = append(gs, st.last)
		}
	}
	if len(gs) < q.need {
		return Grant{}, false
	}
	slices.SortFunc(gs, func(a, b Grant) int { return b.Sent.Compare(a.Sent) })
	return gs[q.need-1], true
}

// acquire tries once to take every account's lease, and keeps them if it
// took a majority; otherwise it gives back those it took, at once (Q2). Its
// error is a *QuorumError.
func (q *quorumLease) acquire(ctx context.Context) (Grant, error) {
	errs := make([]error, len(q.accounts))
	grants := make([]Grant, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) { grants[i], errs[i] = a.Acquire(ctx) })
	q.mu.Lock()
	took := 0
	for i, err := range errs {
		q.state[i] = accountLease{held: err == nil, last: grants[i]}
		if err == nil {
			took++
		}
	}
	g, ok := q.grantLocked()
	q.term, q.extended = Term{}, g
	q.mu.Unlock()
	if ok {
		q.logger.Debug("leaderelection: took the lease on a majority of accounts", "took", took, "of", len(q.accounts), "errors", fmt.Sprint(errs))
		return g, nil
	}
	if took > 0 {
		end, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.settings.RequestTimeout)
		_ = q.giveBack(end) // the minority; what stays unreleased expires
		cancel()
	}
	return Grant{}, q.shortOf("acquire lease", took, errs)
}

// shortOf is the error of an operation that got took accounts, fewer than
// a majority: permanent once too many accounts refuse for good for a
// majority ever to answer; held if any account's lease is another's (its
// holder may lead); lost if any says the lease is gone; transient otherwise.
func (q *quorumLease) shortOf(op string, took int, errs []error) error {
	kind := ErrTransient
	permanent := 0
	for _, err := range errs {
		if errors.Is(err, ErrPermanent) {
			permanent++
		}
	}
	switch {
	case permanent > len(q.accounts)-q.need:
		kind = ErrPermanent
	case slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, ErrLeaseHeld) }):
		kind = ErrLeaseHeld
	case slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, ErrLeaseLost) }):
		kind = ErrLeaseLost
	}
	return &QuorumError{Op: op, Need: q.need, Got: took, Accounts: errs, kind: kind}
}

// QuorumError is a quorum mutex's operation that did not reach a majority
// of accounts: what each account answered (nil where it succeeded). It
// matches one of [ErrLeaseHeld], [ErrLeaseLost], [ErrTransient] or
// [ErrPermanent], for the quorum as a whole: permanent only when so many
// accounts refuse for good that no majority can ever answer.
type QuorumError struct {
	Op       string  // "acquire lease", "renew lease", "write term"
	Need     int     // a majority of the accounts
	Got      int     // how many succeeded
	Accounts []error // each account's error, in the order given; nil where it succeeded

	kind error
}

func (e *QuorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "leaderelection: %s on a majority of accounts: %d of %d succeeded, %d needed (%v)", e.Op, e.Got, len(e.Accounts), e.Need, e.kind)
	for i, err := range e.Accounts {
		if err != nil {
			fmt.Fprintf(&b, "; accounts[%d]: %v", i, err)
		}
	}
	return b.String()
}

// Is reports whether target is the kind of this error.
func (e *QuorumError) Is(target error) bool { return target == e.kind }

// Renew renews the lease on every account held, and tries to take back
// each one not held (retake); it extends the term only when the Q-th
// latest confirmation is later than the one that extended it last (Q1). An error matching ErrLeaseLost means fewer
// than a majority of accounts can still be ours.
func (q *quorumLease) Renew(ctx context.Context) (Grant, error) {
	q.mu.Lock()
	held := make([]bool, len(q.state))
	for i, st := range q.state {
		held[i] = st.held
	}
	q.mu.Unlock()
	errs := make([]error, len(q.accounts))
	grants := make([]Grant, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) {
		if held[i] {
			grants[i], errs[i] = a.Renew(ctx)
			return
		}
		grants[i], errs[i] = q.retake(ctx, i)
	})
	g, err := q.renewed(grants, errs, held)
	if err == nil {
		q.writeHeld(ctx)
	}
	return g, err
}

// renewed takes in a round of renewals (and retakes, where held[i] is
// false): it notes each account's outcome, and returns the grant the round
// extends the term to, if any (Q1).
func (q *quorumLease) renewed(grants []Grant, errs []error, held []bool) (Grant, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	renewed, lost := 0, false
	now := time.Now()
	for i, err := range errs {
		st := &q.state[i]
		switch {
		case err == nil:
			renewed++
			st.held, st.last, st.failing, st.lastErr = true, grants[i], 0, nil
		case held[i] && errors.Is(err, ErrLeaseLost):
			st.held, st.recorded = false, false
			lost = true
			fallthrough
		default:
			st.failing++
			st.lastErr = err
		}
		q.noteHeld(i, st, now)
	}
	g, ok := q.grantLocked()
	switch {
	case !ok || lost && g.Sent.Before(q.extended.Sent):
		return Grant{}, &QuorumError{Op: "renew lease", Need: q.need, Got: renewed, Accounts: errs, kind: ErrLeaseLost}
	case !g.Sent.After(q.extended.Sent):
		// Not a majority's confirmation later than the last one: no
		// extension, and the engine retries after its retry delay.
		return Grant{}, &QuorumError{Op: "renew lease", Need: q.need, Got: renewed, Accounts: errs, kind: ErrTransient}
	}
	q.extended = g
	return g, nil
}

// writeHeld writes the running term, if one is recorded, on every account
// held that does not carry it yet (taken back, or not reached when the term
// was recorded: Q3). Best effort: the lease counts once held.
func (q *quorumLease) writeHeld(ctx context.Context) {
	q.mu.Lock()
	t := q.term
	var todo []int
	for i, st := range q.state {
		if t.Number > 0 && st.held && !st.recorded {
			todo = append(todo, i)
		}
	}
	q.mu.Unlock()
	for _, i := range todo {
		if err := q.writeOn(ctx, i, t); err != nil {
			q.logger.Debug("leaderelection: could not write the term on an account held", append(q.where(i), "term", t.Number, "error", err)...)
		}
	}
}

// noteHeld says at Info when this leader stops holding account i's lease
// (lost, or unrenewed past its last grant), and when it holds it again.
func (q *quorumLease) noteHeld(i int, st *accountLease, now time.Time) {
	switch holds := st.holds(now); {
	case !holds && !st.down:
		st.down = true
		q.logger.Info("leaderelection: no longer holding the lease on an account; leading on the others while they are a majority",
			append(q.where(i), "error", st.lastErr)...)
	case holds && st.down:
		st.down = false
		q.logger.Info("leaderelection: holding the lease on an account again", q.where(i)...)
	}
}

// retake tries to take back account i's lease, which this leader does not
// hold (an account that was down, or that it lost); Renew then writes the
// running term there (Q3).
func (q *quorumLease) retake(ctx context.Context, i int) (Grant, error) {
	return q.accounts[i].Acquire(ctx)
}

// writeOn writes t on account i, whose lease this leader holds, unless the
// account already carries t or a higher term (a higher one is an account
// whose data is not what the majority stored: said at Error).
func (q *quorumLease) writeOn(ctx context.Context, i int, t Term) error {
	a := q.accounts[i]
	// No wait for a blob created again (readForTerm's): this leader holds
	// a majority, so every earlier leader has stopped (Q1), and a term
	// written here only raises the blob's.
	prev, etag, _, err := a.readUnderLease(ctx)
	if err != nil {
		return err
	}
	if prev.Term.Number > t.Number {
		q.logger.Error("leaderelection: an account carries a higher term than the majority's leader recorded: its data is not what a majority stored (restored, or failed over)",
			append(q.where(i), "onAccount", prev.Term.Number, "term", t.Number)...)
	}
	// A seed of the same number (a blob created again with this
	// instance's floor) carries no term: written over too.
	if prev.Term.Number < t.Number || prev.Term.Number == t.Number && prev.Term.Identity == "" {
		t.LeaseID = a.LeaseID()
		if _, err := a.writeTerm(ctx, t, etag); err != nil {
			return err
		}
	}
	q.mu.Lock()
	q.state[i].recorded = true
	q.mu.Unlock()
	return nil
}

// recordTerm records a new term on the accounts held (Q3): it reads each
// one's record, takes 1 + the highest term read there or seen by this
// instance, writes it on each, If-Match the ETag read, and succeeds once a
// majority has stored it.
func (q *quorumLease) recordTerm(ctx context.Context, identity string) (Term, Grant, error) {
	if err := checkIdentity(identity); err != nil {
		return Term{}, Grant{}, err
	}
	q.mu.Lock()
	held := make([]bool, len(q.state))
	for i, st := range q.state {
		held[i] = st.held
	}
	q.mu.Unlock()
	type read struct {
		prev  record
		etag  azcore.ETag
		floor int64
		err   error
	}
	reads := make([]read, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) {
		if !held[i] {
			reads[i].err = errNotHeld
			return
		}
		prev, etag, floor, err := a.readForTerm(ctx)
		reads[i] = read{prev: prev, etag: etag, floor: floor, err: err}
	})
	var n int64
	errs := make([]error, len(q.accounts))
	good := 0
	for i, r := range reads {
		if errs[i] = r.err; r.err != nil {
			continue
		}
		next, ok := wire.NextTerm(r.prev.Term.Number, r.floor)
		if !ok {
			return Term{}, Grant{}, termCannotGrow(q.accounts[i].container, q.accounts[i].blob, max(r.prev.Term.Number, r.floor))
		}
		n = max(n, next)
		good++
	}
	if good < q.need {
		return Term{}, Grant{}, q.unrecorded(good, errs)
	}
	for _, a := range q.accounts {
		// Above every term this instance saw on any account, read now or
		// not (one since rolled back, or down).
		if next, ok := wire.NextTerm(0, a.floor.get()); ok {
			n = max(n, next)
		}
	}
	t := Term{Number: n, Identity: identity, LeaseID: "", Since: time.Now().UTC()}
	written := make([]bool, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) {
		if errs[i] != nil {
			return
		}
		ti := t
		ti.LeaseID = a.LeaseID()
		_, errs[i] = a.writeTerm(ctx, ti, reads[i].etag)
		written[i] = errs[i] == nil
	})
	stored := 0
	for i, ok := range written {
		if ok {
			stored++
			if t.LeaseID == "" {
				t.LeaseID = q.accounts[i].LeaseID()
			}
		}
	}
	if stored < q.need {
		return Term{}, Grant{}, q.unrecorded(stored, errs)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.term = t
	for i, ok := range written {
		q.state[i].recorded = ok
	}
	g, ok := q.grantLocked()
	if !ok {
		return Term{}, Grant{}, q.shortOf("write term", stored, errs)
	}
	return t, g, nil
}

// errNotHeld stands for an account whose lease this contender does not
// hold, in a QuorumError.
var errNotHeld = errors.New("leaderelection: the lease on this account is not held")

// unrecorded is why a term was not stored on a majority (got accounts):
// a record that cannot be built on, or a blob still settling, on so many
// accounts that no majority is left, ends the term before its func starts,
// as for one account; anything else is retried.
func (q *quorumLease) unrecorded(got int, errs []error) error {
	blocked := 0
	var bad *RecordError
	settling := false
	for _, err := range errs {
		var re *RecordError
		switch {
		case errors.As(err, &re):
			blocked++
			bad = cmp(bad, re)
		case errors.Is(err, errNotSettled), errors.Is(err, errNotHeld):
			blocked++
			settling = settling || errors.Is(err, errNotSettled)
		}
	}
	switch {
	case blocked > len(q.accounts)-q.need && bad != nil && !settling:
		return bad
	case blocked > len(q.accounts)-q.need:
		return errNotSettled
	}
	return q.shortOf("write term", got, errs)
}

// cmp keeps the first record problem found.
func cmp(a, b *RecordError) *RecordError {
	if a != nil {
		return a
	}
	return b
}

// endTerm marks t ended on every account that stored it, at once.
func (q *quorumLease) endTerm(ctx context.Context, t Term) error {
	errs := make([]error, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) { errs[i] = a.endTerm(ctx, t) })
	return errors.Join(errs...)
}

// giveBack releases every account's lease at once (a lease not ours counts
// as released), each sent again while its outcome is unknown, until ctx
// ends; the error names the accounts whose release failed.
func (q *quorumLease) giveBack(ctx context.Context) error {
	errs := make([]error, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) { errs[i] = a.giveBack(ctx) })
	q.mu.Lock()
	for i := range q.state {
		q.state[i] = accountLease{}
	}
	q.term = Term{}
	q.mu.Unlock()
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("accounts[%d]: %w", i, err)
		}
	}
	return errors.Join(errs...)
}

// held is how many accounts' leases are held now, of how many.
func (q *quorumLease) held() (held, of int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now()
	for _, st := range q.state {
		if st.holds(now) {
			held++
		}
	}
	return held, len(q.state)
}

// snapshot is what the quorum knows of each account's lease now.
func (q *quorumLease) snapshot() []accountLease {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.state)
}

// closeIdle closes every account's idle connections.
func (q *quorumLease) closeIdle() {
	for _, a := range q.accounts {
		a.CloseIdleConnections()
	}
}

// inspect reads every account's lease at once (see
// [BlobLeaseManager.Inspect]).
func (q *quorumLease) inspect(ctx context.Context) ([]LeaseInfo, []error) {
	infos := make([]LeaseInfo, len(q.accounts))
	errs := make([]error, len(q.accounts))
	q.each(func(i int, a *BlobLeaseManager) { infos[i], errs[i] = a.Inspect(ctx) })
	return infos, errs
}
