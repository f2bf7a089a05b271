package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// A quorum lease's terms (quorum.go's Q3): recorded on a majority before
// the func starts, written on every account held while it runs, marked
// ended and given back on every account at its end.

// recordTerm records a new term on the accounts held (Q3): it reads each
// one's record, takes 1 + the highest term read there, or seen by this
// instance on any account (the managers share one floor), writes it on
// each, If-Match the ETag read, and succeeds once a majority has stored it
// (the writes still out then get a grace, and the accounts they miss get
// the term from writeHeld).
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
	}
	reads := make([]read, len(q.accounts))
	errs := make([]error, len(q.accounts))
	var good atomic.Int32
	q.fan(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
		if !held[i] {
			errs[i] = errNotHeld
			return
		}
		r := &reads[i]
		if r.prev, r.etag, r.floor, errs[i] = a.readForTerm(ctx); errs[i] == nil {
			good.Add(1)
		}
	}, func(int) bool { return int(good.Load()) >= q.need }, q.grace())
	// An account held that must settle first ends the attempt before any
	// term is proposed (unrecorded; Q3).
	if int(good.Load()) < q.need || slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, errNotSettled) }) {
		return Term{}, Grant{}, q.unrecorded(int(good.Load()), errs)
	}
	// Above every term this instance saw on any account, read now or not
	// (one since rolled back, or down).
	var n int64
	if next, ok := wire.NextTerm(0, q.accounts[0].floor.get()); ok {
		n = next
	}
	for i, r := range reads {
		if errs[i] != nil {
			continue
		}
		next, ok := wire.NextTerm(r.prev.Term.Number, r.floor)
		if !ok {
			return Term{}, Grant{}, termCannotGrow(q.accounts[i].container, q.accounts[i].blob, max(r.prev.Term.Number, r.floor))
		}
		n = max(n, next)
	}
	t := Term{Number: n, Identity: identity, Since: time.Now().UTC()}
	q.mu.Lock()
	if p := q.proposed; p.Number > 0 && n <= p.Number+1 && q.accounts[0].floor.onlyMine(p) {
		t = p // proposed again (Q3): nothing at or above it read or seen since but p itself
	}
	q.proposed = t
	q.mu.Unlock()
	written := make([]bool, len(q.accounts))
	var stored atomic.Int32
	q.fan(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
		if errs[i] != nil {
			return
		}
		ti := t
		ti.LeaseID = a.LeaseID()
		if _, errs[i] = a.writeTerm(ctx, ti, reads[i].etag); errs[i] == nil {
			written[i] = true
			stored.Add(1)
		}
	}, func(int) bool { return int(stored.Load()) >= q.need }, q.grace())
	if int(stored.Load()) < q.need {
		return Term{}, Grant{}, q.unrecorded(int(stored.Load()), errs)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, ok := range written {
		if ok && t.LeaseID == "" {
			t.LeaseID = q.accounts[i].LeaseID()
		}
		// Not on an account a renewal found lost meanwhile: it is taken
		// back, and the term written there, as any other.
		q.state[i].recorded = ok && q.state[i].held
	}
	q.term, q.proposed = t, Term{}
	g, ok := q.grantLocked()
	if !ok {
		return Term{}, Grant{}, q.shortOf("write term", int(stored.Load()), errs)
	}
	return t, g, nil
}

// errNotHeld stands for an account whose lease this contender does not
// hold, in a QuorumError.
var errNotHeld = errors.New("leaderelection: the lease on this account is not held")

// unrecorded is why a term was not stored on a majority (got accounts):
// a record that cannot be built on, on so many accounts that no majority
// is left, or a blob still settling on any account held, ends the term
// before its func starts, as for one account (the blob is given back with
// the rest, not held through the retries: Q3); anything else is retried.
func (q *quorumLease) unrecorded(got int, errs []error) error {
	blocked := 0
	var bad *RecordError
	settling := false
	for _, err := range errs {
		var re *RecordError
		switch {
		case errors.As(err, &re):
			blocked++
			if bad == nil {
				bad = re
			}
		case errors.Is(err, errNotSettled), errors.Is(err, errNotHeld):
			blocked++
			settling = settling || errors.Is(err, errNotSettled)
		}
	}
	switch {
	case blocked > len(q.accounts)-q.need && bad != nil && !settling:
		return bad
	case blocked > len(q.accounts)-q.need || settling:
		return errNotSettled
	}
	return q.shortOf("write term", got, errs)
}

// writeHeld writes the running term, if one is recorded, on every account
// held that does not carry it yet (taken back, or not reached when the term
// was recorded: Q3), at once. Best effort: the lease counts once held.
func (q *quorumLease) writeHeld(ctx context.Context) {
	q.mu.Lock()
	t := q.term
	todo := make([]bool, len(q.state))
	any := false
	for i, st := range q.state {
		todo[i] = t.Number > 0 && st.held && !st.recorded
		any = any || todo[i]
	}
	q.mu.Unlock()
	if !any {
		return
	}
	q.each(ctx, func(ctx context.Context, i int, _ *BlobLeaseManager) {
		if !todo[i] {
			return
		}
		if err := q.writeOn(ctx, i, t); err != nil {
			q.logger.Debug("leaderelection: could not write the term on an account held", append(q.where(i), "term", t.Number, "error", err)...)
		}
	})
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
	q.state[i].recorded = q.state[i].held
	q.mu.Unlock()
	return nil
}

// endTerm marks t ended on every account that stored it, at once.
func (q *quorumLease) endTerm(ctx context.Context, t Term) error {
	errs := make([]error, len(q.accounts))
	q.each(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) { errs[i] = a.endTerm(ctx, t) })
	return errors.Join(errs...)
}

// giveBack releases every account's lease at once (a lease not ours counts
// as released), each sent again while its outcome is unknown, until ctx
// ends; the error names the accounts whose release failed.
func (q *quorumLease) giveBack(ctx context.Context) error {
	all := make([]bool, len(q.accounts))
	for i := range all {
		all[i] = true
	}
	return q.giveBackTo(ctx, all)
}

// giveBackTo is giveBack on the accounts which says. With the lease ID
// file held, the file, and every account, move on to a fresh ID before any
// release is sent (Q4); if the file cannot be written, none is sent, and the
// leases expire.
func (q *quorumLease) giveBackTo(ctx context.Context, which []bool) error {
	// The handles are read before the ID moves on, and each account then
	// releases under its own. That is the ID the account's lease was taken
	// or renewed with only because nothing else can change it meanwhile:
	// giveBackTo runs on the contention loop's goroutine, at a term's end,
	// once the engine has stopped its renewals and retakeLoop
	// (onProgress(nil)), or after a minority acquire has returned; no
	// acquire, renewal or retake of this instance is still in flight.
	handles := make([]*leaseHandle, len(q.accounts))
	for i, a := range q.accounts {
		handles[i] = a.id.Load()
	}
	_, err := q.accounts[0].retireLeaseID()
	errs := make([]error, len(q.accounts))
	if err == nil {
		q.each(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
			if which[i] {
				if err := a.giveBackWith(ctx, handles[i]); err != nil {
					errs[i] = fmt.Errorf("accounts[%d]: %w", i, err)
				}
			}
		})
	}
	q.mu.Lock()
	for i := range q.state {
		q.state[i] = accountLease{}
	}
	q.term, q.proposed = Term{}, Term{}
	q.mu.Unlock()
	return errors.Join(append(errs, err)...)
}
