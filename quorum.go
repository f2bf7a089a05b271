package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blobelect/leaderelection/internal/clock"
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
// account not settled counts for no majority until it is. Nor is it held
// by a contender whose term is not recorded yet, which would keep the
// raises of the instances that saw its terms off it: an attempt that finds
// it unsettled among the accounts it holds ends, every account given back
// (unrecorded), and retakeLoop raises and watches it, free, as a look
// does, and takes it only once settled (retake).
//
// A contender whose term fell short of a majority (an account refused the
// write, or did not answer) tries again within the same hold, and
// proposes the same term again, the same record (number, identity,
// since), unless it has read that number, or a higher, in another record
// that names a leader (termFloor.onlyMine: a seed names none), or read or
// seen a higher term at all. A
// hold is one term's run from its acquire: accounts may be lost and taken
// back meanwhile (retakeLoop runs from the acquire), but its fuse never
// blew, so at every moment since the acquire a majority was surely its
// own (Q1); the retries stop once the leader's context ends, which a
// blown fuse or a lease lost ends at once; and every hold begins with an
// acquire, which forgets the proposal, as giving the leases back does.
// So the number is still the next: it was above every term recorded before
// the hold's first proposal (as above); no other contender can have
// recorded a term since, holding no majority; and no func ran under it, as
// none runs under a term not stored on a majority. A request that lands
// late cannot undo this: a term's write is conditional on the lease and on
// the ETag read, only a dead predecessor of the same lease ID file shares
// the lease ID (Q4), and no func ran under its proposals; this hold's own
// earlier writes carry the same record, or, if the proposal moved on, a
// lower one, under which no func ran either. Proposing the next number instead
// would raise the contender's floor at every try, and so the seed it
// raises on a blob created again, whose wait then starts over each time:
// with one account refusing writes and another settling, no term would be
// recorded (the simulator's seed 421500606044: terms 2 to 9 used up in 3.5
// minutes, no leader until the minority came back). Where accounts lost
// their data (the limit above), the first proposal may already repeat a
// number: proposing it again repeats it no more than recording it at the
// first try would have, and another's record of that number, once read,
// moves it on.
//
// Q4. Restart in place (WithLeaseIDFile, resume.go). One file names one
// lease ID, and every account proposes the one derived from it and the
// duration asked (fileLeaseID: the accounts share their timings) while the
// file is held (the first account's manager holds it: one flock for the
// election). It moves on, for
// every account at once and durably, before a release is sent on any
// account (giveBackTo), and before the lock goes: no release of ours, however
// late it lands, carries an ID a later process resumes with. A process that
// takes the lock knows every earlier holder dead (renew.go): no func of it
// runs. On its first turn it acquires, with that ID, every account
// that answered its read, held or not, but one whose record cannot be built
// on (another role's, or not readable: recordProblem), which no contender
// takes: an account its predecessor held is taken back (the server grants
// the same ID's acquire while the lease stands), one held by another
// refuses. From there it is a new leader as
// any: it leads only once it holds a majority by acquires of its own,
// confirmed, whose send times set its deadline (Q1; the predecessor's
// grants count for nothing, and the server restarted each lease's clock no
// earlier than our send); it records a new term as in Q3, read from the
// majority it holds, which meets the majority that stored its
// predecessor's term before that func started, so it is above that term;
// and its func starts once a majority has stored it. A request of the dead
// process that lands late, on any account, is an acquire or a renewal (it
// extends a lease now ours: an acquire under this ID asks for our duration,
// as a predecessor that asked for another proposed another ID) or a term
// write, conditional on the blob's ETag
// and so unable to overwrite a newer term; never a release. An account the
// predecessor held that does not answer keeps its lease, under that ID,
// until it lapses or retakeLoop takes it back with it. A first turn
// that takes a minority gives it back as in Q2, the file moving on first.
// One host only, as for one account: a lock proves nothing across hosts.
//
// Q5. A preferred leader (WithPriority, prefer.go) changes who takes the
// lease next, never when, as for one account (renew.go): the leader's func
// is asked to stop, the lease renewed on the accounts held until it
// returns, then its term marked ended, naming the candidate, on every
// account, and every account released; the candidate takes a majority by
// acquires as any contender (Q1, Q2) and records its term as in Q3. The
// candidates' blobs are kept beside one account's blob only, the same for
// every contender whatever order it lists the accounts in: the least by
// container URL and blob name (besideAccount). While that account is down
// nobody stands as a candidate and no lease is handed over: the leader
// leads on until it stops for another reason, and then leadership moves as
// without priorities; nothing else depends on that account. A follower, a
// process resuming from its lease ID file among them, leaves a lease handed
// to another for handedWait, timed from its first look that found a
// majority free and showed that handover (the ended term and the contender
// it names) on a free account, whichever account showed it: the accounts a
// look reads may change from one look to the next, and a handover whose
// releases landed on a minority frees the rest only a lease later.
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
	beside   int                 // the account the candidates' blobs are kept beside (besideAccount)
	settings BlobSettings        // the first account's: the timings are every account's
	need     int                 // a majority
	logger   *slog.Logger

	mu       sync.Mutex
	state    []accountLease
	term     Term        // the running term, once recorded (Number 0: none)
	proposed Term        // this hold's last term proposed and not recorded (Q3); Number 0: none
	extended Grant       // the Q-th latest confirmation the term was last extended to
	progress func(Grant) // extends the running term's fuse (onProgress); nil between terms

	stopRetakes context.CancelFunc // stops the running term's retakeLoop
	retakesDone chan struct{}      // closed once it has returned
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
	// One floor for the election: a term seen on any account raises the
	// next term, and marks a blob below it (created again, or rolled back
	// empty) as one to wait for (recreated.go), on every account.
	for _, a := range q.accounts[1:] {
		a.floor = q.accounts[0].floor
	}
	// One lease ID file for the election (Q4): the first account's manager
	// holds it, and every account proposes its ID.
	for _, a := range q.accounts[1:] {
		a.idFile.path = ""
	}
	q.accounts[0].idFile.also = q.accounts[1:]
	q.settings, q.logger = q.accounts[0].settings, q.accounts[0].logger
	q.beside = besideAccount(q.accounts)
	return q, nil
}

// besideAccount is the account a quorum's candidates' blobs are kept beside
// (Q5): the one whose container URL (scheme and host in lower case, no
// query) and "/" and blob name is the least, so that every contender picks
// the same account whatever order it lists them in (Q2 needs none).
func besideAccount(accounts []*BlobLeaseManager) int {
	at := func(a *BlobLeaseManager) string { return a.containerClient.Where() + "/" + a.blob }
	best := 0
	for i, a := range accounts {
		if at(a) < at(accounts[best]) {
			best = i
		}
	}
	return best
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

// partsHeldWhenLost is true: a majority lost leaves the accounts still
// held, given back at the term's end so that the next leader need not
// wait them out.
func (q *quorumLease) partsHeldWhenLost() bool { return true }
func (q *quorumLease) kindAttrs() []any {
	return []any{"lease", NativeLease, "quorum", fmt.Sprintf("%d of %d accounts", q.need, len(q.accounts))}
}

// each runs f for every account at once, and returns when all have.
func (q *quorumLease) each(ctx context.Context, f func(ctx context.Context, i int, a *BlobLeaseManager)) {
	q.fan(ctx, f, nil, 0)
}

// fan runs f for every account at once, and calls enough, in this
// goroutine, as each returns, in the order they do. Once enough has
// returned true, the accounts still running get grace more to answer, then
// their contexts are cancelled: a round need not wait a whole
// RequestTimeout for an account once it has what it needs. It returns when
// every f has, so that nothing it started outlives it.
func (q *quorumLease) fan(ctx context.Context, f func(ctx context.Context, i int, a *BlobLeaseManager), enough func(i int) bool, grace time.Duration) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan int, len(q.accounts))
	for i, a := range q.accounts {
		go func() {
			f(ctx, i, a)
			done <- i
		}()
	}
	var late <-chan time.Time
	graced := false
	for left := len(q.accounts); left > 0; {
		select {
		case i := <-done:
			left--
			if !graced && enough != nil && enough(i) {
				graced = true
				t := time.NewTimer(grace)
				defer t.Stop()
				late = t.C
			}
		case <-late:
			cancel()
			late = nil
		}
	}
}

// grace is how long a contender's reads and acquires, and a new term's
// read and write, wait for the accounts that have not answered once a
// majority has (fan): a quarter of RetryInterval, at least 100 ms. An
// account slower than that is left out of the round: a follower counts it
// as not free, a contender as not taken (its lease, if the request took it,
// is taken back by the leader's retakeLoop, or given back with the rest),
// a term as not written there yet (writeHeld writes it).
func (q *quorumLease) grace() time.Duration {
	return max(q.settings.RetryInterval/4, 100*time.Millisecond)
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

// acquire tries once to take the lease on each account try says (those a
// contender's read found free), and keeps them if it took a majority;
// otherwise it gives back every account it tried, at once (Q2): those it
// took, and those whose answer it did not get, which the request may have
// taken. Its error is a *QuorumError.
func (q *quorumLease) acquire(ctx context.Context, try []bool) (Grant, error) {
	errs := make([]error, len(q.accounts))
	grants := make([]Grant, len(q.accounts))
	var took atomic.Int32
	q.fan(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
		if !try[i] {
			errs[i] = errNotTried
			return
		}
		if grants[i], errs[i] = a.Acquire(ctx); errs[i] == nil {
			took.Add(1)
		}
	}, func(int) bool { return int(took.Load()) >= q.need }, q.grace())
	q.mu.Lock()
	for i, err := range errs {
		// An account not taken is said held again once it is (noteHeld),
		// not said lost at the term's first renewal.
		q.state[i] = accountLease{held: err == nil, last: grants[i], down: err != nil}
	}
	g, ok := q.grantLocked()
	q.term, q.proposed, q.extended = Term{}, Term{}, g
	q.mu.Unlock()
	if ok {
		return g, nil
	}
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), q.settings.RequestTimeout)
	if err := q.giveBackTo(end, try); err != nil {
		// What stays unreleased expires; with a lease ID file that could
		// not move on, no release was sent at all (Q4).
		q.logger.Warn("leaderelection: could not release the lease; it will expire by itself",
			"container", q.settings.Container, "blob", q.settings.Blob, "error", err)
	}
	cancel()
	return Grant{}, q.shortOf("acquire lease", int(took.Load()), errs)
}

// errNotTried stands for an account a contender did not try to take, its
// read having found it held, settling, another role's or unreachable, in a
// QuorumError.
var errNotTried = errors.New("leaderelection: not tried: its lease was not seen free")

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
// accounts refuse for good that no majority can ever answer. It does not
// unwrap to the accounts' errors, whose kinds are not the quorum's (one
// account refusing for good is no reason to stop): read Accounts.
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

// Renew renews the lease on every account held, all at once, and takes in
// each answer as it comes: the term is extended, through the engine's hook
// (onProgress), as soon as an answer moves the Q-th latest confirmation
// past the one that extended it last (Q1), not when the slowest account has
// answered. Once every account held has answered (each within
// RequestTimeout), it returns that extension, if the round made one; an
// error matching ErrLeaseLost when fewer than a majority are held, or when
// an account the server said is no longer ours left the rest's Q-th latest
// behind the fuse's; transient otherwise. Accounts not held are taken back
// beside it (retakeLoop).
func (q *quorumLease) Renew(ctx context.Context) (Grant, error) {
	q.mu.Lock()
	held := make([]bool, len(q.state))
	for i, st := range q.state {
		held[i] = st.held
	}
	before := q.extended
	q.mu.Unlock()
	errs := make([]error, len(q.accounts))
	var lost atomic.Bool
	q.each(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
		if !held[i] {
			errs[i] = errNotHeld
			return
		}
		g, err := a.Renew(ctx)
		errs[i] = err
		if q.took(i, g, err, true) {
			lost.Store(true)
		}
	})
	renewed := 0
	for _, err := range errs {
		if err == nil {
			renewed++
		}
	}
	q.mu.Lock()
	at, ok := q.grantLocked()
	g := q.extended
	q.mu.Unlock()
	switch {
	case !ok || lost.Load() && at.Sent.Before(g.Sent):
		return Grant{}, &QuorumError{Op: "renew lease", Need: q.need, Got: renewed, Accounts: errs, kind: ErrLeaseLost}
	case !g.Sent.After(before.Sent):
		// No majority's confirmation later than the last: the engine
		// retries after its retry delay.
		return Grant{}, &QuorumError{Op: "renew lease", Need: q.need, Got: renewed, Accounts: errs, kind: ErrTransient}
	}
	return g, nil
}

// onProgress sets, for the life of a term, the hook through which the
// quorum extends its fuse as answers come (nil at the term's end), and
// starts, or stops and waits for, the loop that takes back the accounts
// not held (retakeLoop): nothing it starts outlives the term.
func (q *quorumLease) onProgress(extend func(Grant)) {
	q.mu.Lock()
	q.progress = extend
	stop, done := q.stopRetakes, q.retakesDone
	q.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
	if extend == nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	q.mu.Lock()
	q.stopRetakes, q.retakesDone = cancel, make(chan struct{})
	done = q.retakesDone
	q.mu.Unlock()
	go func() {
		defer close(done)
		q.retakeLoop(ctx)
	}()
}

// retakeLoop, while a term runs, tries every RenewInterval to take back the
// accounts this leader does not hold (down, lost, or taken by another when
// it acquired), each at once and apart from the renewals, so that an
// account that answers slowly, or needs its container and blob created
// again, holds no renewal back; and writes the running term on the
// accounts held that lack it (writeHeld, Q3). An account taken back counts
// toward the majority from its acquire's send time, as any (took).
func (q *quorumLease) retakeLoop(ctx context.Context) {
	for clock.Sleep(ctx, q.settings.RenewInterval) {
		q.mu.Lock()
		held := make([]bool, len(q.state))
		for i, st := range q.state {
			held[i] = st.held
		}
		q.mu.Unlock()
		q.each(ctx, func(ctx context.Context, i int, _ *BlobLeaseManager) {
			if held[i] {
				return
			}
			g, err := q.retake(ctx, i)
			if ctx.Err() == nil {
				q.took(i, g, err, false)
			}
		})
		q.writeHeld(ctx)
	}
}

// took takes in account i's answer to a renewal (held) or a retake, as it
// comes: it notes the outcome, and extends the term if the Q-th latest
// confirmation moved (Q1). It reports whether the server said the lease is
// no longer ours there.
func (q *quorumLease) took(i int, g Grant, err error, held bool) (lost bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	st := &q.state[i]
	switch {
	case err == nil:
		if !held {
			st.recorded = false // taken back: the term is written there again
		}
		st.held, st.last, st.failing, st.lastErr = true, g, 0, nil
	case held && errors.Is(err, ErrLeaseLost):
		st.held, st.recorded = false, false
		lost = true
		fallthrough
	default:
		st.failing++
		st.lastErr = err
	}
	q.noteHeld(i, st, time.Now())
	if at, ok := q.grantLocked(); ok && at.Sent.After(q.extended.Sent) {
		q.extended = at
		if q.progress != nil {
			q.progress(at)
		}
	}
	return lost
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
// hold (an account that was down, or that it lost, or whose acquire's
// answer it did not wait for); retakeLoop then writes the running term
// there (Q3). It reads the blob first, and takes no blob of another role or
// whose record cannot be built on (renew.go's rule on roles), nor, until
// the term is recorded, a blob created again that has not settled: it
// raises and watches that one as a contender's look does (seedFresh, Q3);
// then it acquires with its own lease ID, which takes a free lease, extends
// one that is already its own, and fails on another's.
func (q *quorumLease) retake(ctx context.Context, i int) (Grant, error) {
	a := q.accounts[i]
	info, err := a.Inspect(ctx)
	if err != nil {
		return Grant{}, err
	}
	if problem := a.recordProblem(info); problem.blocks() {
		return Grant{}, problem
	}
	if !q.recorded() && a.seedFresh(ctx, info) > 0 {
		return Grant{}, errNotSettled
	}
	return a.Acquire(ctx)
}

// recorded reports whether the running term is recorded on a majority.
func (q *quorumLease) recorded() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.term.Number > 0
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
// [BlobLeaseManager.Inspect]); once a majority has answered, the others get
// a grace (fan).
func (q *quorumLease) inspect(ctx context.Context) ([]LeaseInfo, []error) {
	infos := make([]LeaseInfo, len(q.accounts))
	errs := make([]error, len(q.accounts))
	var answered atomic.Int32
	q.fan(ctx, func(ctx context.Context, i int, a *BlobLeaseManager) {
		if infos[i], errs[i] = a.Inspect(ctx); errs[i] == nil {
			answered.Add(1)
		}
	}, func(int) bool { return int(answered.Load()) >= q.need }, q.grace())
	return infos, errs
}
