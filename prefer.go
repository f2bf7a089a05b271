package leaderelection

import (
	"context"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
	"github.com/google/uuid"
)

// A preferred leader (WithPriority). A leader whose record declares a
// priority lists, every RetryInterval, the candidates' blobs beside its
// lease (<blob>.candidates/<identity>): a follower of strictly higher
// priority than the leader's record declares keeps one there, under a
// native lease of its own that it renews while it waits, so that a
// candidate that dies stops counting within a native lease. Seeing a live
// one, the leader asks its func to stop (ErrPreferredCandidate), and, once
// the func has returned, marks the term ended naming that candidate, then
// releases the lease, as at any graceful stop. The candidate takes the free
// lease at its next poll; the other followers leave a lease handed to
// another for handedWait before they try for it (the candidate may have
// died since). Nothing of this decides whether two funcs may run at once:
// the handover is a release after the func returned, and the take an
// acquire as any (see the top of renew.go).

// WithPriority gives this contender a priority, and makes it watch for
// contenders of higher priority while it leads. While a live contender of
// strictly higher priority waits, the leader stops its func (its context's
// cause is [ErrPreferredCandidate]), releases the lease once the func has
// returned, and leaves it to that contender: in a rolling update, give the
// new version a higher priority (its build number, say), and leadership
// moves once, to the first new instance, not at every restart. Contenders
// of equal priority never take over from each other. A leader without the
// option (an older version) does not watch, and is not waited for.
//
// Cost: a leader lists the candidates every RetryInterval (1,800 requests
// an hour at the defaults); a follower that outranks the leader keeps a
// lease on its candidate blob (a renewal every RenewInterval, 720 an hour)
// until it leads. Applies to a [BlobDistributedMutex]; a ShardOwner refuses
// it.
func WithPriority(p int) Option {
	return func(o *options) { o.priority, o.prioritySet = p, true }
}

// candidateLease is a candidate blob's native lease: the shortest.
const candidateLease = 15 * time.Second

// handedWait is how long a follower leaves a free lease that an ended term
// handed to another contender: that contender reads it within a
// RetryInterval (jittered) and takes it within a RequestTimeout.
func (s BlobSettings) handedWait() time.Duration {
	return 2*s.RetryInterval + s.RequestTimeout
}

// candidacy is a blob a follower keeps beside the lease: its candidacy,
// while it outranks the leader, or its mark that it sees a twin lead.
// Touched only by the Run goroutine.
type candidacy struct {
	lease   string // the ID of the lease held on the blob, "" for none
	name    string // under <blob>.candidates/
	renewed time.Time
	failing failureLog
}

// twinCheckEvery is how many RetryIntervals a leader without a priority
// lets pass between two looks for a twin's mark (a minute at the
// defaults): the one thing it looks for there.
const twinCheckEvery = 30

// candidateRenew is how often a standing candidate renews its blob's
// lease, and the longest it waits between two polls meanwhile.
const candidateRenew = candidateLease / 3

// preferMetadata adds this holder's priority to its record, and the
// contender it hands the lease to, once chosen.
func (m *BlobDistributedMutex) preferMetadata(md map[string]*string) {
	p := strconv.Itoa(m.opts.priority)
	md[wire.MetaPriority] = &p
	if next := m.handTo.Load(); next != nil {
		md[wire.MetaNext] = next
	}
}

// besideLease is the lease whose blob the blobs of candidates and twins'
// marks are kept beside: the mutex's own, or a quorum's account chosen
// alike by every contender (besideAccount).
func (m *BlobDistributedMutex) besideLease() *BlobLeaseManager {
	if m.quorum != nil {
		return m.quorum.accounts[m.quorum.beside]
	}
	return m.lease
}

func (m *BlobDistributedMutex) candidateBlob(name string) *blobstore.Blob {
	l := m.besideLease()
	return l.containerClient.Blob(l.blob + wire.CandidatesDir + name)
}

// stand keeps, or drops, this follower's candidacy after a look at the
// lease: it stands while the lease is held under a record that declares a
// lower priority than its own, by another identity. While it stands, wait
// is cut so that it renews its blob's lease in time.
func (m *BlobDistributedMutex) stand(ctx context.Context, info LeaseInfo, wait *time.Duration) {
	if !m.opts.prioritySet || !info.Held() || info.TermPending() {
		return // free, or taken and not yet recorded: the next look says
	}
	c := &m.candidate
	if !info.Prioritized || m.opts.priority <= info.Priority || info.Leader.Identity == m.opts.identity {
		m.withdraw(ctx, c)
		return
	}
	// Standing, it polls four times as often: the lease comes to it free,
	// at its next look (a handful of instances, for the length of a
	// rollout).
	*wait = min(*wait, m.lease.settings.RetryInterval/4)
	p := strconv.Itoa(m.opts.priority)
	if m.keepBlob(ctx, c, m.opts.identity, map[string]*string{wire.MetaPriority: &p}, wait) {
		m.logger.Info("leaderelection: waiting as a preferred candidate: the leader has a lower priority", "container", m.lease.settings.Container, "blob", m.lease.settings.Blob,
			"identity", m.opts.identity, "priority", m.opts.priority, "leader", info.Leader.Identity, "leaderPriority", info.Priority)
	}
}

// markTwin keeps, while this follower sees a live leader with its own
// identity, a blob beside the lease that says so (with this process's
// instance, which the leader's is not), so that the leader can warn too
// (see watchCandidates); and drops it once it no longer does.
func (m *BlobDistributedMutex) markTwin(ctx context.Context, twin bool, wait *time.Duration) {
	c := &m.twinMark
	if !twin {
		m.withdraw(ctx, c)
		return
	}
	m.keepBlob(ctx, c, m.opts.identity+"."+m.instance, nil, wait)
}

// keepBlob keeps a blob beside the lease, <blob>.candidates/<name>, with
// this contender's identity and instance and md, under a native lease of
// candidateLease that it renews every candidateRenew (and so cuts wait to
// that). It reports whether it took the blob's lease just now.
func (m *BlobDistributedMutex) keepBlob(ctx context.Context, c *candidacy, name string, md map[string]*string, wait *time.Duration) bool {
	l := m.besideLease()
	s := l.settings
	*wait = min(*wait, candidateRenew)
	if c.lease != "" && time.Since(c.renewed) < candidateRenew {
		return false
	}
	beside := blobstore.Call{Op: "write beside the lease", Held: heldCodes, Lost: lostCodes}
	fail := func(err error) {
		c.failing.failed(m.logger, "leaderelection: cannot keep a blob beside the lease (a preferred candidate's, or a twin's mark); retrying", "container", s.Container, "blob", s.Blob,
			"error", l.wrap(err))
	}
	if c.lease != "" {
		_, err := m.candidateBlob(c.name).RenewLease(ctx, c.lease, beside)
		if err == nil {
			c.renewed = time.Now()
			return false
		}
		if !blobstore.HasCode(err, blobstore.LeaseIDMismatchWithLeaseOperation, blobstore.LeaseNotPresentWithLeaseOperation, blobstore.BlobNotFound) {
			fail(err) // perhaps renewed: keep the ID, and try again at the next poll
			return false
		}
		c.lease = "" // lapsed and taken, or deleted: take it again
	}
	meta := map[string]*string{wire.MetaIdentity: to.Ptr(m.opts.identity), wire.MetaInstance: to.Ptr(m.instance), wire.MetaRole: to.Ptr(string(RoleCandidate))}
	for k, v := range md {
		meta[k] = v
	}
	// Written before the lease is taken: a blob left leased by this
	// identity's previous run refuses the write, and the acquire, until
	// that lease lapses.
	b := m.candidateBlob(name)
	if _, err := b.Put(ctx, blobstore.WriteOptions{Call: beside, Metadata: meta}); err != nil {
		fail(err)
		return false
	}
	// An answer with another lease ID than the one proposed is an error of
	// kind Held (the storage package checks it): the blob is not ours.
	taken, err := b.AcquireLease(ctx, blobstore.AcquireOptions{Call: beside, ID: uuid.NewString(), Duration: candidateLease})
	if err != nil {
		fail(err)
		return false
	}
	c.lease, c.renewed, c.name = taken.ID, time.Now(), name
	c.failing.recovered(m.logger, "leaderelection: keeps its blob beside the lease again", "container", s.Container, "blob", s.Blob)
	return true
}

// withdraw deletes a blob kept beside the lease (c), if any, within ctx.
func (m *BlobDistributedMutex) withdraw(ctx context.Context, c *candidacy) {
	if c.lease == "" {
		return
	}
	id := c.lease
	c.lease = ""
	_ = m.candidateBlob(c.name).Delete(ctx, blobstore.DeleteOptions{LeaseID: id})
}

// handover names a lease handed to a contender: the term that ended
// handing it, and that contender.
type handover struct {
	term int64
	to   string
}

// deferTo reports whether this follower leaves the free lease info shows to
// the contender the ended term handed it to, and for how long yet. The wait
// is timed from the first look that showed that handover (term and
// contender), not from a change of the blob's ETag: a quorum's accounts
// carry the same handover under ETags of their own, and which of them a
// look shows may change from one look to the next (quorum.go's Q5).
func (m *BlobDistributedMutex) deferTo(info LeaseInfo) (time.Duration, bool) {
	if info.Held() || info.HandedTo == "" || info.HandedTo == m.opts.identity || info.LeaderEnded.IsZero() {
		return 0, false
	}
	if h := (handover{info.Leader.Number, info.HandedTo}); m.handed != h {
		m.handed, m.handedSeen = h, time.Now()
	}
	left := m.lease.settings.handedWait() - time.Since(m.handedSeen)
	return left, left > 0
}

// watchCandidates lists the blobs beside the lease while the func runs:
// with a priority every RetryInterval, and asks the func to stop once a live
// candidate of higher priority waits; without, every twinCheckEvery
// RetryIntervals, for a twin's mark only. Either way it warns of a twin. It
// passes over the contender the lease was handed to when this term took it
// (passedOver) for a candidate lease: its blob may outlive it that long,
// and handing the lease back to it would move leadership for nothing. It
// deletes the blobs of candidates gone for a candidate lease.
func (m *BlobDistributedMutex) watchCandidates(ctx context.Context, pleaseStop context.CancelCauseFunc, passedOver string) {
	l := m.besideLease()
	s := l.settings
	began := time.Now()
	prefix := l.blob + wire.CandidatesDir
	gone := map[string]time.Time{} // unleased candidate blobs, since when
	twins := map[string]bool{}     // twins' instances warned of, this term
	var failing failureLog
	every, listOp := s.RetryInterval, "list candidates"
	if !m.opts.prioritySet {
		every, listOp = twinCheckEvery*s.RetryInterval, "list beside the lease" // a twin's mark only
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		best, bestP := "", m.opts.priority
		listed := map[string]bool{}
		var listErr error
		for page, err := range l.containerClient.List(ctx, blobstore.ListOptions{Call: blobstore.Call{Op: listOp}, Prefix: prefix, Metadata: true}) {
			if err != nil {
				listErr = err
				break
			}
			for _, b := range page.Items {
				listed[b.Name] = true
				if b.LeaseState != blobstore.StateLeased {
					// Not standing: a candidate that died, or is standing
					// up. Gone for a candidate lease, it is deleted.
					if since, ok := gone[b.Name]; !ok {
						gone[b.Name] = time.Now()
					} else if time.Since(since) >= candidateLease {
						_ = l.containerClient.Blob(b.Name).Delete(ctx, blobstore.DeleteOptions{})
						delete(gone, b.Name)
					}
					continue
				}
				delete(gone, b.Name)
				id := wire.Value(b.Metadata, wire.MetaIdentity)
				// A twin's mark declares no priority; a candidacy does, and
				// one of this identity's previous process (restarted in
				// place) may stand a while yet: no twin.
				if inst := wire.Value(b.Metadata, wire.MetaInstance); id == m.opts.identity && inst != "" && inst != m.instance &&
					wire.Value(b.Metadata, wire.MetaPriority) == "" && !twins[inst] {
					twins[inst] = true
					m.logger.Warn("leaderelection: another live instance contends with this instance's identity; give each instance an identity of its own (WithIdentity)",
						"container", s.Container, "blob", s.Blob, "identity", id)
				}
				p, err := strconv.Atoi(wire.Value(b.Metadata, wire.MetaPriority))
				if err != nil || !m.opts.prioritySet || id == "" || id == m.opts.identity || wire.Value(b.Metadata, wire.MetaRole) != string(RoleCandidate) {
					continue
				}
				if id == passedOver && time.Since(began) < candidateLease {
					continue
				}
				if p > bestP || p == bestP && best != "" && id < best {
					best, bestP = id, p
				}
			}
		}
		for name := range gone {
			if !listed[name] {
				delete(gone, name)
			}
		}
		if listErr != nil {
			if ctx.Err() != nil {
				return
			}
			if !m.opts.prioritySet {
				// Only a twin's mark is looked for: the renewals say
				// whether storage is failing.
				m.logger.Debug("leaderelection: cannot list the blobs beside the lease", "container", s.Container, "blob", s.Blob,
					"error", l.wrap(listErr))
			} else {
				failing.failed(m.logger, "leaderelection: cannot list the preferred candidates; retrying", "container", s.Container, "blob", s.Blob,
					"error", l.wrap(listErr))
			}
			continue
		}
		failing.recovered(m.logger, "leaderelection: can list the preferred candidates again", "container", s.Container, "blob", s.Blob)
		if best != "" {
			m.handTo.Store(&best)
			m.logger.Info("leaderelection: handing the lease to a contender of higher priority", "container", s.Container, "blob", s.Blob,
				"to", best, "priority", bestP, "ownPriority", m.opts.priority)
			pleaseStop(ErrPreferredCandidate)
			return
		}
	}
}
