package leaderelection

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The shard tier's storage plumbing: the blobs' names, the lease managers
// and the requests the parts share (a listing, a shard's create, acquire,
// change and record write, the held lists' and notes' reads and writes), and
// the bookkeeping of shards whose record cannot be built on. It uses only the
// shared state (shardstate.go, sessionstate.go) and the lower tiers.

// listedItem is what a listing says of a blob: its properties as listed,
// ETag quoted as a header gives it (blobstore.QuotedETag), and when its page
// arrived.
func listedItem(name string, p blobstore.Props) listed {
	l := listed{name: name}
	l.info = LeaseInfo{Exists: true, Received: p.Received}
	l.info.State, l.info.Status, l.info.Duration = leaseOf(p)
	switch l.info.Duration {
	case durationFixed:
		l.info.Kind = NativeLease
	case durationInfinite:
		l.info.Kind = ETagLease
	}
	l.info.ETag = p.ETag
	l.info.LastModified = p.LastModified
	f := wire.ParseListed(p.Metadata)
	l.session, l.owned, l.set, l.sessionTerm, l.leaving, l.handing, l.size = f.Session, f.Owned, f.Set, f.Gen, f.Leaving, f.Handing, f.Size
	l.seen, l.seenBad = f.Seen, unlessSecret(f.SeenBad)
	l.longest, l.longestBad = f.Longest, unlessSecret(f.LongestBad)
	return l
}

func (o *ShardOwner) sessionBlob(id string) string { return wire.SessionBlob(o.prefix, id) }

func (o *ShardOwner) shardBlob(name string) string { return wire.ShardBlob(o.prefix, name) }

func (o *ShardOwner) heldBlob(session string) string { return wire.HeldBlob(o.prefix, session) }

func (o *ShardOwner) handoffPrefix(session string) string {
	return wire.NotePrefix(o.prefix, session)
}

// managerFor returns a lease manager for one blob under the owner's prefix,
// proposing leaseID, on the owner's client: the shards' leases, and other
// sessions' (to break them), share one connection pool; this instance's
// own session's lease has one of its own (managerOn sessionClient).
func (o *ShardOwner) managerFor(name, leaseID string) *BlobLeaseManager {
	return o.managerOn(o.storage.client, name, leaseID)
}

func (o *ShardOwner) managerOn(cc *blobstore.Client, name, leaseID string) *BlobLeaseManager {
	s := o.settings
	s.Blob = name
	var role BlobRole
	switch {
	case strings.HasPrefix(name, o.prefix+wire.SessionsDir):
		role = RoleSession
	case strings.HasPrefix(name, o.prefix+wire.ShardsDir):
		role = RoleShard
	}
	m := newManagerOn(s, cc, role, leaseID, o.logger, o.opts.seams.boot)
	if o.storage.reached.Load() {
		// A DNS or TLS failure is an outage now, not a misspelt account:
		// the session's client too, which may not have been answered yet.
		cc.MarkReached()
	}
	return m
}

// wrapListing is err, a failed listing or read of the storage package, as
// the owner returns it: a *StorageError that names the container and the
// owner's prefix (its settings' Blob).
func (o *ShardOwner) wrapListing(err error) error {
	return storageError(err, o.settings.Container, o.settings.Blob)
}

// listed is one blob of a listing under the prefix, as far as leases go.
type listed struct {
	name    string    // the session ID or the shard name: the blob's name after its directory
	info    LeaseInfo // lease state and kind, ETag, the record, when the page arrived
	session string    // a shard's record: the session that wrote it ("" if none)
	owned   int       // a session's record: how many shards it held (-1 if none)
	set     string    // a session's record: its set's digest ("" if none: an older version)
	size    int       // a session's record: how many shards its set has (-1 if none)
	leaving bool      // a session's record: it hands its shards on, to end
	handing int       // a session's record: how many shards it is handing over (0 if it does not say)
	seen    int64     // a session's record: the highest term its instance saw on any shard (0 if it does not say)
	seenBad string    // a session's record: that highest term, if it does not read or no claim reaches it (not trusted)
	// longest is, in a session's record, the longest lease duration its
	// instance knows a session declared (0 if it does not say, or it does
	// not read: then longestBad, not trusted). See mayRun.
	longest     time.Duration
	longestBad  string
	ended       bool               // a session's record carries the end mark: the session is dead, whatever its lease
	md          map[string]*string // the metadata as listed: a session's end mark writes it back
	sessionTerm int64              // a shard's record: its claiming session's term (0 if none: handed to it)
	record      bool               // the blob carries a record: its holder wrote it under its lease
	rec         record             // the record as read (record.go): its role, and what does not read
}

// isSession reports whether a blob under the sessions prefix says it is a
// session: its role, or (written by a version before roles) its record's
// count of shards held.
func (l listed) isSession() bool {
	return l.rec.Role == wire.RoleSession || l.rec.Role == "" && l.owned >= 0
}

// releasedBy reports whether a free shard listed (l) was released by one of
// peers: its lease available (not broken, never taken) under a peer's
// record.
func (l listed) releasedBy(peers map[string]bool) bool {
	return l.info.State == stateAvailable && peers[l.session]
}

// list reads every blob under dir (wire.SessionsDir or ShardsDir) with its
// metadata, listPage a page, and calls fn for each in name order. Each page is
// one request, bounded by RequestTimeout; Received is when its page arrived.
// It returns errContainerGone if the container is gone.
func (o *ShardOwner) list(ctx context.Context, dir string, fn func(listed)) error {
	full := o.prefix + dir
	timeout := o.settings.RequestTimeout
	if dir == wire.ShardsDir {
		timeout = max(timeout, listPageTimeout)
	}
	for page, err := range o.storage.client.List(ctx, blobstore.ListOptions{
		Call:     blobstore.Call{Op: "list " + strings.TrimSuffix(dir, "/"), Timeout: timeout},
		Prefix:   full,
		Metadata: true,
		PageSize: listPage,
	}) {
		if blobstore.HasCode(err, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted) {
			return errContainerGone // nothing there: not yet, or no more (shardfloors.go)
		}
		if err != nil {
			return o.wrapListing(err)
		}
		o.storage.reached.Store(true)
		for _, item := range page.Items {
			if !strings.HasPrefix(item.Name, full) {
				continue
			}
			l := listedItem(strings.TrimPrefix(item.Name, full), item.Props)
			l.rec = readRecord(o.settings.Container, item.Name, item.Metadata)
			l.rec.fill(&l.info)
			l.record = l.info.Leader.Identity != ""
			l.ended = l.rec.EndMark
			l.md = item.Metadata
			fn(l)
		}
	}
	return nil
}

// listPage is how many blobs a List Blobs page asks for: a fifth of Azure's
// maximum. A page is one piece of work for the server, which other requests
// may wait behind (on Azurite, three instances listing 10,000 shards in
// pages of 5,000 held a session's write up to 2.2 s; in pages of 1,000, at
// most 0.46 s, for the same total), and sessions must get their writes
// through while ownership moves.
var listPage int32 = 1000

// listPageTimeout bounds a page of the shards' listing: a page may take a
// busy account seconds, and nothing waits on it that a deadline protects.
const listPageTimeout = 30 * time.Second

// createShard creates a shard's blob, empty, if nobody has: a conditional
// upload (If-None-Match: *), seeded with seed (marked as created again if
// above 0). It returns the new blob's ETag; an error matching ErrLeaseHeld
// if the blob exists already (another claim made it).
func (o *ShardOwner) createShard(ctx context.Context, lm *BlobLeaseManager, seed int64) (azcore.ETag, error) {
	etag, err := lm.blobClient.Create(ctx, blobstore.WriteOptions{
		Call: blobstore.Call{Op: "create shard", Timeout: o.settings.claimTimeout(),
			Held: []string{blobstore.BlobAlreadyExists, blobstore.ConditionNotMet, blobstore.LeaseIDMissing}},
		Metadata: wire.CreateMetadata(wire.RoleShard, seed, time.Now()),
	})
	if err != nil {
		return "", lm.wrap(err)
	}
	if etag == "" {
		return "", &StorageError{Op: "create shard", Container: lm.container, Blob: lm.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return etag, nil
}

// acquireIfMatch takes the shard's infinite lease with lm's ID, if the blob's
// ETag is still etag. ErrLeaseHeld: another holds it, or the blob changed.
func (o *ShardOwner) acquireIfMatch(ctx context.Context, lm *BlobLeaseManager, etag azcore.ETag) error {
	// An answer with another lease ID than ours is an error of kind Held
	// (the storage package checks it).
	_, err := lm.blobClient.AcquireLease(ctx, blobstore.AcquireOptions{
		Call: blobstore.Call{Op: "acquire shard lease", Timeout: o.settings.claimTimeout(),
			Held: append([]string{blobstore.ConditionNotMet, blobstore.BlobNotFound}, heldCodes...)},
		ID: lm.LeaseID(), Duration: blobstore.Infinite, IfMatch: etag,
	})
	return lm.wrap(err)
}

// changeLease changes the shard's lease ID from lm's to id, If-Match etag
// unless it is "". It returns the blob's ETag, which a lease's change leaves
// as it was.
func (o *ShardOwner) changeLease(ctx context.Context, lm *BlobLeaseManager, id string, etag azcore.ETag) (azcore.ETag, error) {
	changed, err := lm.blobClient.ChangeLease(ctx, blobstore.ChangeOptions{
		Call: blobstore.Call{Op: "change shard lease", Held: []string{blobstore.ConditionNotMet}, Lost: lostCodes},
		From: lm.LeaseID(), To: id, IfMatch: etag,
	})
	if err != nil {
		return "", lm.wrap(err)
	}
	if changed.ETag == "" {
		return "", &StorageError{Op: "change shard lease", Container: lm.container, Blob: lm.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return changed.ETag, nil
}

// infiniteLease reads a shard's blob after a change of its lease to this
// claim's ID (whose answer carried etag), and returns "" if the lease is an
// infinite one at that ETag, as every lease the library takes on a shard
// is; else the claim's outcome. A fixed lease under the ID a session
// derived was acquired by another writer that guessed it (other-writers.md):
// it expires on its own, and a func run under it, never renewed, would run
// on past its end (a simulator's finding, seed 783364844376).
func (o *ShardOwner) infiniteLease(ctx context.Context, lm *BlobLeaseManager, etag azcore.ETag) string {
	props, err := lm.blobClient.Properties(ctx, blobstore.Call{Op: "read shard", Lost: lostCodes})
	switch {
	case err != nil:
		return outcome(lm.wrap(err), "taken")
	case props.ETag != etag:
		return "held" // written meanwhile: only a holder writes it
	case props.LeaseDuration != blobstore.DurationInfinite:
		o.logger.Warn("leaderelection: a shard's lease under the ID its session derived is not one the library takes (a fixed lease: another writer's); giving it back",
			"shard", lm.blob, "leaseDuration", string(props.LeaseDuration))
		return "held"
	}
	return ""
}

// writeShardRecord writes the shard's record under its lease, if the blob's
// ETag is still etag, and returns the ETag it made. sessionTerm is the term
// of the claiming session that the lease ID derives from
// (wire.ClaimLeaseID), 0 for a transfer (wire.HandoffLeaseID).
func (o *ShardOwner) writeShardRecord(ctx context.Context, lm *BlobLeaseManager, t Term, sessionID string, sessionTerm int64, etag azcore.ETag) (azcore.ETag, error) {
	md := wire.ShardMetadata(wireTerm(t), o.settings.LeaseDuration, sessionID, sessionTerm)
	written, err := lm.blobClient.SetMetadata(ctx, blobstore.SetMetadataOptions{
		Call:     blobstore.Call{Op: "write shard record", Timeout: o.settings.claimTimeout(), Held: []string{blobstore.ConditionNotMet}, Lost: lostCodes},
		Metadata: md, LeaseID: lm.LeaseID(), IfMatch: etag,
	})
	if err != nil {
		return "", lm.wrap(err)
	}
	if written == "" {
		return "", &StorageError{Op: "write shard record", Container: lm.container, Blob: lm.blob, detail: "the answer carried no ETag", kind: ErrTransient}
	}
	return written, nil
}

// readHeld reads a dead session's list. An error if there is none, or it
// does not read whole: the caller lists the shards instead.
func (o *ShardOwner) readHeld(ctx context.Context, session string) ([]heldEntry, error) {
	name := o.heldBlob(session)
	resp, err := o.storage.client.Blob(name).Download(ctx, blobstore.DownloadOptions{Call: blobstore.Call{Op: "read held shards"}, Limit: wire.MaxHeldBytes + 1})
	if err != nil {
		if blobstore.HasCode(err, blobstore.BlobNotFound) {
			return nil, fmt.Errorf("leaderelection: no list of the shards session %s held (%s)", session, name)
		}
		return nil, o.wrapListing(err)
	}
	body := resp.Data
	if len(body) > wire.MaxHeldBytes {
		return nil, fmt.Errorf("leaderelection: the list of the shards session %s held (%s) is over %d bytes", session, name, wire.MaxHeldBytes)
	}
	hs, err := wire.ParseHeld(string(body), wire.Value(resp.Metadata, wire.MetaHeld), wire.Value(resp.Metadata, wire.MetaRole))
	if err != nil {
		return nil, err
	}
	var out []heldEntry
	for _, e := range hs {
		out = append(out, heldEntry{name: e.Name, term: e.Term, sessionTerm: e.Gen, etag: azcore.ETag(e.ETag)})
	}
	return out, nil
}

func (o *ShardOwner) putHeld(ctx context.Context, session, text string) error {
	_, err := o.storage.client.Blob(o.heldBlob(session)).Put(ctx, blobstore.WriteOptions{Metadata: wire.HeldMetadata(text), Content: []byte(text)})
	return err
}

// dropHeld deletes a session's list: it has ended, or is dead and collected.
func (o *ShardOwner) dropHeld(ctx context.Context, session string) {
	_ = o.storage.client.Blob(o.heldBlob(session)).Delete(ctx, blobstore.DeleteOptions{})
}

// dropNotes deletes the notes left for a session that has ended, as far as
// ctx allows: best effort (a note is only a hint; one left over names shards
// whose conditions fail). Nothing is sent once ctx is done.
func (o *ShardOwner) dropNotes(ctx context.Context, session string) {
	if ctx.Err() != nil {
		return
	}
	for page, err := range o.storage.client.List(ctx, blobstore.ListOptions{Prefix: o.handoffPrefix(session)}) {
		if err != nil {
			return
		}
		for _, b := range page.Items {
			_ = o.storage.client.Blob(b.Name).Delete(ctx, blobstore.DeleteOptions{})
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// shardProblem is what keeps a shard's blob, as listed, from being claimed or
// broken by this owner: nil if nothing. A fixed (native) lease is never a
// shard's, and followers never break one; another role's blob is another
// owner's; and a term number that does not read, or cannot grow, is not
// continued (a fencing token never repeats or goes down).
func (o *ShardOwner) shardProblem(l listed) *RecordError {
	blob := o.shardBlob(l.name)
	switch {
	case l.rec.Role != "" && l.rec.Role != wire.RoleShard:
		return foreignRole(o.settings.Container, blob, BlobRole(l.rec.Role), RoleShard)
	case l.info.Held() && l.info.Kind == NativeLease:
		return &RecordError{Container: o.settings.Container, Blob: blob, Key: "x-ms-lease-duration", Value: string(l.info.Duration),
			Rule: "is a fixed (native) lease, which no shard holds: another owner's (a mutex's?), never broken"}
	case l.rec.TermBad:
		return l.rec.problem
	case l.info.Leader.Number == math.MaxInt64 && !(l.info.Held() && l.session != ""):
		return termCannotGrow(o.settings.Container, blob, l.info.Leader.Number)
	}
	return nil
}

// sawShard notes what one read of a shard's blob (not a listing) tells of
// its record: p, the problem no term can follow, or nil. Each is reported
// as noteBadShards reports a listing's: a problem once for each value, a
// repair once.
func (o *ShardOwner) sawShard(name string, p *RecordError) {
	old, was := o.state.markBad(name, p)
	switch {
	case p != nil && (!was || old.Key != p.Key || old.Value != p.Value):
		o.logBadShard(name, p)
	case p == nil && was:
		o.logReadsAgain(name)
	}
}

// noteBadShard adds one shard found unclaimable outside a listing.
func (o *ShardOwner) noteBadShard(name string, p *RecordError) {
	o.state.markBad(name, p)
	o.logBadShard(name, p)
}

// noteBadShards replaces the shards found unclaimable by the last listing,
// logging each at Error once for each value, and those repaired since.
func (o *ShardOwner) noteBadShards(bad map[string]*RecordError) {
	old := o.state.replaceBad(bad)
	for name, p := range bad {
		if q, ok := old[name]; !ok || q.Key != p.Key || q.Value != p.Value {
			o.logBadShard(name, p)
		}
	}
	for name := range old {
		if _, ok := bad[name]; !ok {
			o.logReadsAgain(name)
		}
	}
}

func (o *ShardOwner) logBadShard(name string, p *RecordError) {
	o.logger.Error("leaderelection: a shard cannot run: its blob's record cannot be built on; repair it (leaderctl repair)",
		"container", p.Container, "blob", p.Blob, "shard", name, "key", p.Key, "value", p.Value, "error", p)
}

func (o *ShardOwner) logReadsAgain(name string) {
	o.logger.Info("leaderelection: a shard's blob reads again; it is claimed as any other",
		"container", o.settings.Container, "shard", name)
}
