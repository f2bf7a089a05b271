package leaderelection

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/blobelect/leaderelection/internal/memblob"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// WithLeaseIDFile and WithPriority over a quorum of accounts (quorum.go's
// Q4 and Q5), on in-memory accounts (quorum_test.go's fleet).

// A leader restarted in place takes back, with the file's lease ID, the
// leases its dead process held on every account, at once rather than once
// they lapse, and leads on under the next term; a follower waiting all along
// never leads. The crash: the leader's storage goes silent (no request of it
// reaches an account), it stops, and its file is put back as a process that
// died before it could move the file on leaves it.
func TestQuorumMutexRestartedInPlaceTakesItsLeasesBack(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		before := goleak.IgnoreCurrent()
		path := filepath.Join(t.TempDir(), "lease-id")
		f := newQuorumFleet(t, 3, 1, nil, WithLeaseIDFile(path))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		f.add() // a follower, without a file
		f.start()
		s := f.accounts[0].withDefaults()
		time.Sleep(s.RenewInterval + time.Second) // renewed on every account, the follower polling
		require.NoError(t, f.mutexes[0].Degraded(), "the leader holds every account")
		raw := readIDFile(t, path)
		id := proposedFor(t, f.accounts[0], raw)

		for _, tr := range f.cut[0] {
			tr.Blackhole()
		}
		_, err := f.stops[0]()
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, os.WriteFile(path, []byte(raw+"\n"), 0o600))

		restarted := time.Now()
		again := f.add(WithIdentity("q0"), WithLeaseIDFile(path))
		f.start()
		// IsLeader is set just before the func runs: wait for both.
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() >= 0 }, time.Minute, 10*time.Millisecond)
		took := time.Since(restarted)
		runs := f.runs()
		require.Len(t, runs, 2)
		assert.Equal(t, again, runs[1].who, "the restarted process leads, not the follower")
		assert.Less(t, took, 2*s.RetryInterval, "its leases taken back at once, not after they lapsed (%v)", s.LeaseDuration)
		assert.Equal(t, runs[0].term.Number+1, runs[1].term.Number, "the next term: nobody led in between")
		assert.Equal(t, id, runs[1].term.LeaseID, "under the file's lease ID")
		require.NoError(t, f.mutexes[again].Degraded(), "every account taken back")
		f.checkApart()

		for _, i := range []int{1, again} {
			_, err := f.stops[i]()
			require.ErrorIs(t, err, context.Canceled)
		}
		goleak.VerifyNone(t, before)
	})
}

// One file names one lease ID for every account, and it moves on, for every
// account, before a release is sent on any: a process resuming from the
// file never proposes an ID whose release was sent, on any account.
func TestQuorumLeaseIDFileNeverHoldsAnIDWhoseReleaseWasSent(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		path := filepath.Join(t.TempDir(), "lease-id")
		f := newQuorumFleet(t, 3, 0, nil)
		var (
			mu       sync.Mutex
			releases []string // "released-ID file-content" at send time
		)
		spy := func(req *http.Request) {
			if header(req, "x-ms-lease-action") != "release" {
				return
			}
			b, err := os.ReadFile(path)
			mu.Lock()
			defer mu.Unlock()
			releases = append(releases, header(req, "x-ms-lease-id")+" "+strings.TrimSpace(string(b))+errString(err))
		}
		var accounts []BlobSettings
		for _, s := range f.accounts {
			s, tr := instanceOn(s, memoryOf(s))
			t.Cleanup(tr.Close)
			s.ClientOptions.Transport = releaseSpy{next: tr, onRequest: spy}
			accounts = append(accounts, s)
		}
		var (
			proposed [][]string // each term: its lease ID, the file's, every account's
			enough   = make(chan struct{})
		)
		var m *BlobDistributedMutex
		m, err := NewQuorumMutex(accounts, func(ctx context.Context) error {
			term, _ := TermFromContext(ctx)
			b, err := os.ReadFile(path)
			ids := []string{term.LeaseID, strings.TrimSpace(string(b)) + errString(err)}
			for _, a := range m.quorum.accounts {
				ids = append(ids, a.LeaseID())
			}
			proposed = append(proposed, ids)
			if len(proposed) == 3 {
				close(enough)
			}
			return nil // each term ends at once and releases every account
		}, WithLeaseIDFile(path), WithLogger(testLogger(t, "q")), bubbleClock())
		require.NoError(t, err)
		stop := runMutex(t, m)
		select {
		case <-enough:
		case <-time.After(time.Minute):
			t.Fatal("three terms did not run within a minute")
		}
		_, err = stop()
		require.ErrorIs(t, err, context.Canceled)

		seen := map[string]bool{}
		for _, ids := range proposed {
			ids[1] = proposedFor(t, f.accounts[0], ids[1])
			for _, id := range ids[1:] {
				assert.Equal(t, ids[0], id, "the term's lease ID is the file's and every account's: %v", ids)
			}
			seen[ids[0]] = true
		}
		assert.Len(t, seen, len(proposed), "each term has a fresh ID: the last one's was released")
		mu.Lock()
		defer mu.Unlock()
		require.GreaterOrEqual(t, len(releases), 3*len(proposed), "every term's lease was released on every account")
		for _, r := range releases {
			fields := strings.Fields(r)
			require.Len(t, fields, 2, r)
			assert.NotEqual(t, fields[0], proposedFor(t, f.accounts[0], fields[1]), "a release was sent while the file still held its ID")
		}
	})
}

// A contender of higher priority takes over a quorum gracefully: the
// leader's func is asked to stop and returns, its lease context never
// ending, and only then does the candidate's func start, ahead of a
// follower of the leader's priority; then nothing moves again.
func TestQuorumMutexPreferredCandidateTakesOver(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		before := goleak.IgnoreCurrent()
		stops := make(chan Event, 10)
		f := newQuorumFleet(t, 3, 1, nil, WithPriority(1), WithEvents(func(e Event) {
			if e.Kind == StoppedLeading {
				stops <- e
			}
		}))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		f.add(WithPriority(1))
		f.start()
		s := f.accounts[0].withDefaults()
		time.Sleep(2 * s.RetryInterval)

		preferred := f.add(WithPriority(2))
		f.start()
		at := time.Now()
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() >= 0 }, time.Minute, 10*time.Millisecond)
		runs := f.runs()
		assert.Equal(t, preferred, runs[1].who, "the preferred candidate leads next")
		assert.LessOrEqual(t, runs[1].started.Sub(at), preferBound(s))
		assert.True(t, runs[0].leaseEnded.IsZero(), "the leader stopped gracefully, its lease context never ended")
		select {
		case e := <-stops:
			assert.Equal(t, ReasonPreferred, e.Reason)
		case <-time.After(5 * time.Second):
			t.Fatal("no StoppedLeading event for the leader that handed over")
		}

		time.Sleep(4 * s.RetryInterval)
		assert.Len(t, f.runs(), 2, "leadership moved once")
		f.stop()
		f.checkApart()
		goleak.VerifyNone(t, before)
	})
}

// A candidate that dies once a quorum's lease was handed to it: the
// followers, the leader that handed it among them, leave the lease to it
// for handedWait, then one takes it and passes the candidate over while its
// blob outlives it: leadership moves once.
func TestQuorumMutexLeavesAHandedLeaseToItsCandidateAWhile(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 3, 1, nil, WithPriority(1))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		f.add(WithPriority(1))
		f.start()
		s := f.accounts[0].withDefaults()
		stood := time.Now()
		standGhost(t, f.mutexes[0], "ghost", 2, true)
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() >= 0 }, time.Minute, 10*time.Millisecond)
		runs := f.runs()
		assert.GreaterOrEqual(t, runs[1].started.Sub(runs[0].stopped), s.handedWait(), "the lease was left to the candidate it was handed to")
		time.Sleep(time.Until(stood.Add(candidateLease + time.Second)))
		assert.Len(t, f.runs(), 2, "q%d still leads: the ghost is passed over", runs[1].who)
		f.stop()
		f.checkApart()
	})
}

// A lease handed to a candidate that never comes is taken after handedWait
// even when the free accounts a follower reads change from one look to the
// next: here the only contender, the leader that handed it, reads the first
// account past the grace at every other look, so that its looks show the
// handover on the first account, then on the second. The wait is timed on
// the handover (term and candidate), not on one account's ETag.
func TestQuorumMutexHandedWaitEndsWhileTheAccountsReadAlternate(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 3, 0, nil)
		var slow atomic.Bool
		f.addWith(nil, func(i int, tr policy.Transporter) policy.Transporter {
			if i > 0 {
				return tr
			}
			return &everyOtherRead{next: tr, slow: &slow, by: time.Second}
		}, WithPriority(1))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		s := f.accounts[0].withDefaults()
		slow.Store(true)
		standGhost(t, f.mutexes[0], "ghost", 2, true)
		require.Eventually(t, func() bool { return len(f.runs()) == 1 && f.leader() < 0 }, time.Minute, 10*time.Millisecond)
		stopped := f.runs()[0].stopped
		bound := s.handedWait() + 4*s.RetryInterval
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() == 0 }, 2*time.Minute, 10*time.Millisecond,
			"the lease handed to the ghost is taken back within handedWait and a few looks (%v)", bound)
		runs := f.runs()
		require.Len(t, runs, 2)
		took := runs[1].started.Sub(stopped)
		assert.GreaterOrEqual(t, took, s.handedWait(), "the lease was left to the candidate a while")
		assert.LessOrEqual(t, took, bound)
		f.stop()
		f.checkApart()
	})
}

// everyOtherRead holds every other read of a blob's properties (a look at
// the lease) by, or until its request's context ends, once slow is set.
type everyOtherRead struct {
	next policy.Transporter
	slow *atomic.Bool
	by   time.Duration
	n    atomic.Int64
}

func (e *everyOtherRead) Inner() policy.Transporter { return e.next }

func (e *everyOtherRead) Do(req *http.Request) (*http.Response, error) {
	if e.slow.Load() && req.Method == http.MethodHead && e.n.Add(1)%2 == 0 {
		select {
		case <-time.After(e.by):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	return e.next.Do(req)
}

// Contenders that list the accounts in different orders (leading needs
// none: Q2) still meet at one account for the candidates' blobs: a
// candidate whose first account is not the leader's is seen and handed the
// lease. Neither lists the chosen account (besideAccount) first.
func TestQuorumCandidatesStandWhereTheLeaderLooksWhateverTheOrder(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 3, 0, nil)
		f.addWith([]int{1, 0, 2}, nil, WithPriority(1))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		s := f.accounts[0].withDefaults()
		preferred := f.addWith([]int{2, 0, 1}, nil, WithPriority(2))
		f.start()
		at := time.Now()
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() == preferred }, preferBound(s), 10*time.Millisecond,
			"the preferred candidate, listing the accounts in another order, leads within %v", preferBound(s))
		assert.LessOrEqual(t, f.runs()[1].started.Sub(at), preferBound(s))
		for _, m := range f.mutexes {
			assert.Equal(t, f.accounts[0].Container, m.besideLease().container, "the least container URL, whatever the order")
		}
		f.stop()
		f.checkApart()
	})
}

// A minority acquire whose give-back cannot move the lease ID file on (so
// sends no release) says so at Warn, as a term's release does: here the
// file's descriptor is closed under the mutex once it contends, and its
// first try, on every account with the file's ID (Q4), finds each held by
// another leader.
func TestQuorumMinorityGiveBackWithoutItsFileSaysSo(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 3, 1, nil)
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		logger, logs := quietLogs(t, "q1")
		var (
			m    *BlobDistributedMutex
			once sync.Once
		)
		breakFile := func(*http.Request) {
			once.Do(func() {
				fl := &m.lease.idFile
				fl.mu.Lock()
				defer fl.mu.Unlock()
				require.NotNil(t, fl.f, "the file is held while the mutex contends")
				require.NoError(t, fl.f.Close())
			})
		}
		who := f.addWith(nil, func(i int, tr policy.Transporter) policy.Transporter {
			return releaseSpy{next: tr, onRequest: breakFile}
		}, WithLeaseIDFile(filepath.Join(t.TempDir(), "lease-id")), WithLogger(logger))
		m = f.mutexes[who]
		f.start()
		require.Eventually(t, func() bool {
			return strings.Contains(logs.String(), `level=WARN msg="leaderelection: could not release the lease; it will expire by itself"`) &&
				strings.Contains(logs.String(), "release lease not sent")
		}, time.Minute, 10*time.Millisecond)
		assert.Equal(t, 0, f.leader())
		f.stop()
	})
}

// A second quorum mutex on a lease ID file held by a running one is
// refused at once, as for one account: it sends nothing to any account,
// never proposes the holder's ID, and the leader leads on.
func TestQuorumSecondHolderOfLeaseIDFileIsRefused(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		path := filepath.Join(t.TempDir(), "lease-id")
		f := newQuorumFleet(t, 3, 1, nil, WithLeaseIDFile(path))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		id := proposedFor(t, f.accounts[0], readIDFile(t, path))
		var sent atomic.Int32
		who := f.addWith(nil, func(_ int, tr policy.Transporter) policy.Transporter {
			return releaseSpy{next: tr, onRequest: func(*http.Request) { sent.Add(1) }}
		}, WithLeaseIDFile(path))
		second := f.mutexes[who]
		start := time.Now()
		err := second.RunTaskWhenMutexAcquired(context.Background())
		require.ErrorIs(t, err, ErrLeaseIDFileLocked)
		assert.Contains(t, err.Error(), path)
		assert.Less(t, time.Since(start), time.Second, "refused at once, not after contending")
		assert.Zero(t, sent.Load(), "no request sent to any account")
		for i, a := range second.quorum.accounts {
			assert.NotEqual(t, id, a.LeaseID(), "accounts[%d] of the refused mutex proposes the holder's ID", i)
		}
		time.Sleep(2 * f.accounts[0].withDefaults().RenewInterval)
		assert.Equal(t, 0, f.leader(), "the leader leads on")
		assert.Len(t, f.runs(), 1)
		require.NoError(t, f.mutexes[0].Degraded())
		_, err = f.stops[0]()
		require.ErrorIs(t, err, context.Canceled)
	})
}

// A handover whose releases land on a minority (the leader's releases on
// two of three accounts fail; their leases lapse a lease after its last
// renewal there) is left to the candidate for handedWait from when a
// majority is free, not from the first free account.
func TestQuorumHandedWaitStartsWhenAMajorityIsFree(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		f := newQuorumFleet(t, 3, 0, nil)
		var (
			mu       sync.Mutex
			renewed  time.Time // the leader's last renewal sent to accounts 1 and 2 before its release
			released bool
		)
		f.addWith(nil, func(i int, tr policy.Transporter) policy.Transporter {
			if i == 0 {
				return tr
			}
			return noRelease{next: tr, on: func(action string) {
				mu.Lock()
				defer mu.Unlock()
				released = released || action == "release"
				if action == "renew" && !released {
					renewed = time.Now()
				}
			}}
		}, WithPriority(1))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		f.add(WithPriority(1))
		f.start()
		s := f.accounts[0].withDefaults()
		time.Sleep(s.RenewInterval + time.Second) // renewed at least once on every account
		standGhost(t, f.mutexes[0], "ghost", 2, true)
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() >= 0 }, 2*time.Minute, 10*time.Millisecond)
		mu.Lock()
		free := renewed.Add(s.LeaseDuration) // accounts 1 and 2 free from then
		mu.Unlock()
		runs := f.runs()
		require.False(t, runs[0].stopped.After(free), "the handing leader's func stopped before its last leases lapsed")
		assert.GreaterOrEqual(t, runs[1].started.Sub(free), s.handedWait(),
			"q%d took the lease %v after a majority was free (its func stopped %v before that)", runs[1].who, runs[1].started.Sub(free), free.Sub(runs[0].stopped))
		f.stop()
		f.checkApart()
	})
}

// noRelease fails every release it is asked to send, as a connection reset
// would, and tells on each request's lease action first.
type noRelease struct {
	next policy.Transporter
	on   func(action string)
}

func (n noRelease) Inner() policy.Transporter { return n.next }

func (n noRelease) Do(req *http.Request) (*http.Response, error) {
	action := header(req, "x-ms-lease-action")
	n.on(action)
	if action == "release" {
		return nil, syscall.ECONNRESET
	}
	return n.next.Do(req)
}

// A process restarted from its lease ID file after its term was marked
// ended, handing the lease to another contender, leaves the lease to that
// contender for handedWait, as any follower does.
func TestQuorumResumedProcessRespectsItsPredecessorsHandover(t *testing.T) {
	inBubble(t, func(t *testing.T, _ *memblob.Service) {
		path := filepath.Join(t.TempDir(), "lease-id")
		f := newQuorumFleet(t, 3, 1, nil, WithPriority(1), WithLeaseIDFile(path))
		f.start()
		require.Eventually(t, func() bool { return f.leader() == 0 }, time.Minute, 10*time.Millisecond)
		s := f.accounts[0].withDefaults()
		standGhost(t, f.mutexes[0], "ghost", 2, true)
		require.Eventually(t, func() bool { return len(f.runs()) == 1 && !f.runs()[0].stopped.IsZero() }, time.Minute, 10*time.Millisecond)
		_, err := f.stops[0]()
		require.ErrorIs(t, err, context.Canceled)

		restarted := time.Now()
		again := f.add(WithIdentity("q0"), WithPriority(1), WithLeaseIDFile(path))
		f.start()
		require.Eventually(t, func() bool { return len(f.runs()) == 2 && f.leader() == again }, time.Minute, 10*time.Millisecond)
		assert.GreaterOrEqual(t, f.runs()[1].started.Sub(restarted), s.handedWait(), "the lease was left to the ghost it was handed to")
		_, err = f.stops[again]()
		require.ErrorIs(t, err, context.Canceled)
		f.checkApart()
	})
}
