package leaderelection

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/blobstore"
	"github.com/blobelect/leaderelection/internal/clock"
	"github.com/google/uuid"
)

// BlobLeaseManager acquires, renews, releases and breaks the lease on one blob.
// [BlobDistributedMutex] uses it; it is exported for callers who want to drive
// the lease themselves. Every request is bounded by
// BlobSettings.RequestTimeout (or an earlier deadline on its context), and
// the SDK's own retries are turned off, so a call never outlives the time the
// lease has left. Renew, Release and Break make one request; Inspect one;
// RecordTerm two (read, then a conditional write); Acquire one, or up to five
// when it must create the container and the blob first. Its methods are safe
// for concurrent use.
//
// Every storage failure it returns is a [*StorageError] matching one of
// [ErrLeaseHeld], [ErrLeaseLost], [ErrTransient] or [ErrPermanent]; an invalid
// argument is a plain error, and nothing is sent.
type BlobLeaseManager struct {
	settings  BlobSettings // with defaults applied
	container string
	blob      string
	// id is the lease ID proposed; replaced after a release whose outcome
	// is unknown (see Release).
	id atomic.Pointer[leaseHandle]
	// record is the term record written under the current acquisition of
	// an ETag lease, which its renewals write again (see etaglease.go).
	record atomic.Pointer[termRecord]

	// containerClient is the storage package's client for the container
	// (internal/blobstore: it bounds every request, turns the SDK's retries
	// off, classifies failures and knows whether the account has answered),
	// and blobClient its handle on the blob.
	containerClient *blobstore.Client
	blobClient      *blobstore.Blob

	logger *slog.Logger
	boot   clock.Boot  // the clock a term's deadline is held on beside the monotonic one (see safetyFuse)
	idFile leaseIDFile // see WithLeaseIDFile, in resume.go

	// role is what the blob is for (record.go): a mutex's, unless a
	// ShardOwner's session or shard. floor is the highest term seen on it
	// (shared by a quorum's managers: the highest seen on any account).
	role  BlobRole
	floor *termFloor
	// settle is, beyond what a leader needs to notice a deletion, how long
	// a blob created again must stand unchanged, as this manager watched
	// it, before a term is recorded on it (see settleFor); 0: at once (a
	// manager used directly, a session's).
	settle time.Duration
	fresh  freshWatch

	// A session's lease (session.go): always an ETag lease, whatever its
	// duration, and its record carries what extraMetadata adds.
	alwaysETag    bool
	extraMetadata func(map[string]*string)
}

// String describes m by its settings, without their secrets (see
// [BlobSettings.String]); GoString, Format and LogValue print the same, so
// that a manager printed or logged with any verb shows no key or token.
func (m *BlobLeaseManager) String() string { return "BlobLeaseManager{" + m.settings.String() + "}" }

// GoString is String.
func (m *BlobLeaseManager) GoString() string { return m.String() }

// Format prints String whatever the verb.
func (m *BlobLeaseManager) Format(f fmt.State, verb rune) { printRedacted(f, verb, m.String()) }

// LogValue lets log/slog print m without its secrets.
func (m *BlobLeaseManager) LogValue() slog.Value { return slog.StringValue(m.String()) }

// Grant describes a successful acquire or renew.
type Grant struct {
	// LeaseID is the lease's ID, as the server confirmed it.
	LeaseID string
	// Sent is when the request was sent. The server starts the lease's
	// clock when it processes the request, later than this.
	Sent time.Time
	// Expires is Sent + LeaseDuration: the server cannot expire the lease
	// before this moment. Both carry Go's monotonic clock reading, so
	// comparisons with time.Now are immune to wall-clock jumps.
	//
	// For an [ETagLease] only a write under the lease counts: a renewal,
	// or the term record. The acquire itself secures nothing (a follower
	// that has timed the blob's ETag since before it may break the lease
	// until the holder's first write changes it): the Expires of its grant
	// only bounds how long to try to record the term.
	Expires time.Time

	bootSent time.Duration // the boot clock when the request was sent (see safetyFuse)
}

// LeaseInfo is the state of a lease as the server reports it, with the
// record the last leader wrote into the blob's metadata.
type LeaseInfo struct {
	// Exists is false when the lease blob has not been created yet: nobody
	// has ever contended on it.
	Exists   bool
	State    lease.StateType    // available, leased, expired, breaking or broken
	Status   lease.StatusType   // locked or unlocked
	Duration lease.DurationType // fixed or infinite; "" when not leased
	// Kind is the kind of the lease held: [NativeLease] (fixed) or
	// [ETagLease] (infinite); "" when not leased.
	Kind LeaseKind
	// Leader is the last recorded leader's term (its LeaseID is not
	// readable and stays empty). While Held() it is the current leader's,
	// unless TermPending().
	Leader Term
	// LeaderEnded is when Leader ended its term by releasing the lease;
	// zero while its term runs, or if it ended it otherwise (crashed, cut
	// off, lost its lease).
	LeaderEnded time.Time
	// DeclaredDuration is the LeaseDuration the writer of the record
	// declared, 0 if it declared none. Followers time an ETag lease's
	// silence against it. A value that does not read, or lies outside what
	// any setting can declare (3 s to 24 h), counts as 24 h, and
	// RecordError says so.
	DeclaredDuration time.Duration
	// Priority is what the record's holder declared with [WithPriority],
	// if Prioritized: such a holder, while it leads, hands the lease to a
	// waiting contender of strictly higher priority. HandedTo is the
	// identity an ended term handed the lease to; the others leave the
	// free lease to it for a moment.
	Priority    int
	Prioritized bool
	HandedTo    string
	// Role is what the blob says it is for: a mutex's lease, a ShardOwner's
	// session or shard; "" if it says nothing (a blob written by no one of
	// ours, or by an earlier version).
	Role BlobRole
	// RecordError is set when the record does not read (a value another
	// writer put there): what it names is not trusted. Leader.Number is 0
	// when it is the term number that does not read.
	RecordError *RecordError
	// Recreated is when the blob was created again under a fleet that had
	// recorded terms on it (deleted, or its container, meanwhile): it was
	// seeded with the highest term its creator had seen. Zero otherwise.
	Recreated time.Time
	// seedLongest is, on a blob created again, the longest lease duration
	// its seed says a holder of it declared (record.seedLongest).
	seedLongest time.Duration
	// ETag is the blob's ETag, which every write of the record (every
	// renewal of an ETag lease, a term's record and its end) changes, and
	// no lease operation does.
	ETag azcore.ETag
	// LastModified is when the blob was last written, by the server's
	// clock, to the second: for an ETag lease, its last renewal or record.
	LastModified time.Time
	// Received is when the answer arrived, by this machine's clock (with
	// its monotonic reading): after the server wrote what it describes.
	Received time.Time
}

// Held reports whether someone holds the lease: it is leased, or breaking
// (its holder still acts until the break period ends).
func (i LeaseInfo) Held() bool {
	return i.State == lease.StateTypeLeased || i.State == lease.StateTypeBreaking
}

// TermPending reports whether the lease is held by an instance that has not
// recorded its term yet: Leader is then its predecessor, whose term has
// ended. This is known when the predecessor released the lease. A holder
// that took the lease after its predecessor crashed is, for the moment
// between its acquire and its term record (one round trip, unless storage
// fails), indistinguishable from that predecessor to a reader that did not
// see the lease free in between.
func (i LeaseInfo) TermPending() bool { return i.Held() && !i.LeaderEnded.IsZero() }

// NewBlobLeaseManager validates settings and builds the clients. It makes no
// network call: the container and the blob are created by the first Acquire
// that finds them missing.
func NewBlobLeaseManager(settings BlobSettings, opts ...Option) (*BlobLeaseManager, error) {
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	if err := checkLeaseIDFile(o.leaseIDFile, o.leaseIDFileSet); err != nil {
		return nil, err
	}
	settings = settings.withDefaults()
	cc, err := settings.storeClient(0)
	if err != nil {
		return nil, err
	}
	bc := cc.Blob(settings.Blob)
	m := &BlobLeaseManager{
		settings:        settings,
		container:       settings.Container,
		blob:            settings.Blob,
		containerClient: cc,
		blobClient:      bc,
		logger:          o.logger,
		boot:            o.seams.boot,
		idFile:          leaseIDFile{path: o.leaseIDFile},
		role:            RoleMutex,
		floor:           &termFloor{},
	}
	m.newLeaseID()
	return m, nil
}

// newManagerOn builds the manager of the blob settings.Blob on the storage
// client cc (settings with defaults applied), proposing leaseID, for a blob
// of role: what a ShardOwner builds for its sessions' and shards' blobs,
// which share its settings and its clients (managerOn).
func newManagerOn(settings BlobSettings, cc *blobstore.Client, role BlobRole, leaseID string, logger *slog.Logger, boot clock.Boot) *BlobLeaseManager {
	m := &BlobLeaseManager{
		settings:        settings,
		container:       settings.Container,
		blob:            settings.Blob,
		containerClient: cc,
		blobClient:      cc.Blob(settings.Blob),
		logger:          logger,
		boot:            boot,
		role:            role,
		floor:           &termFloor{},
	}
	m.proposeLeaseID(leaseID)
	return m
}

// leaseHandle is a proposed lease ID. A release compares handles, not IDs:
// see release.
type leaseHandle struct {
	id string
}

// newLeaseID makes the manager propose a fresh GUID from now on.
func (m *BlobLeaseManager) newLeaseID() { m.proposeLeaseID(uuid.NewString()) }

// proposeLeaseID makes the manager propose id from now on.
func (m *BlobLeaseManager) proposeLeaseID(id string) {
	m.id.Store(&leaseHandle{id: id})
}

// wrap is err, a failed request of the storage package, as this manager
// returns it: a *StorageError that names its container and blob (see
// storageError).
func (m *BlobLeaseManager) wrap(err error) error { return storageError(err, m.container, m.blob) }

// LeaseID is the GUID this manager proposes as the lease ID. It stays the
// same until a release fails (see Release), so an acquire whose response was
// lost can be retried: the server answers the same ID's second acquire with
// success. With [WithLeaseIDFile] it is the file's while the file is held
// (a GUID derived from the file's and the duration the lease asks for: see
// WithLeaseIDFile), and changes at every release.
func (m *BlobLeaseManager) LeaseID() string { return m.id.Load().id }

// Settings returns the settings in force, with defaults applied.
func (m *BlobLeaseManager) Settings() BlobSettings { return m.settings }

// Lease operation error codes, the storage package's lists. Any of
// lostCodes on a renew means the lease is no longer ours: released, broken,
// expired and taken, or its blob is gone. heldCodes mean another instance
// holds the lease. Do not modify them: append to a copy.
var (
	lostCodes = blobstore.LostCodes
	heldCodes = blobstore.HeldCodes
)

// call bounds ctx by RequestTimeout, for several requests that must be done
// within one (each request is bounded by it anyway, and sent without the
// SDK's retries: see internal/blobstore), or for a request whose deadline
// must start before its send time is taken (see grant).
func (m *BlobLeaseManager) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, m.settings.RequestTimeout)
}

// Acquire tries once to take the lease, creating the container and the blob
// first if they are missing. It returns an error matching [ErrLeaseHeld] when
// another instance holds the lease.
func (m *BlobLeaseManager) Acquire(ctx context.Context) (Grant, error) {
	acquire := blobstore.Call{Op: "acquire lease", Held: heldCodes}
	g, err := m.acquire(ctx, "", acquire)
	if blobstore.HasCode(err, blobstore.BlobNotFound, blobstore.ContainerNotFound) {
		if err := m.ensureBlob(ctx); err != nil {
			return Grant{}, err
		}
		g, err = m.acquire(ctx, "", acquire)
	}
	if err != nil {
		if blobstore.HasCode(err, blobstore.BlobNotFound, blobstore.ContainerNotFound) {
			// Deleted again between creation and acquire: try again later.
			return Grant{}, &StorageError{Op: "acquire lease", Container: m.container, Blob: m.blob,
				StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
		}
		return Grant{}, m.wrap(err)
	}
	return g, nil
}

// acquire sends one acquire of the lease with this manager's ID, on
// condition (If-Match) that the blob's ETag is still ifMatch, if not "". Its
// error is the storage package's, for c (an answer with another lease ID
// than ours is one of kind Held), for the caller to wrap.
func (m *BlobLeaseManager) acquire(ctx context.Context, ifMatch azcore.ETag, c blobstore.Call) (Grant, error) {
	ctx, cancel := m.call(ctx) // see grant
	defer cancel()
	h := m.id.Load()
	m.forgetRecord()
	sent, bootSent := time.Now(), m.boot()
	_, err := m.blobClient.AcquireLease(ctx, blobstore.AcquireOptions{Call: c, ID: h.id,
		Duration: time.Duration(m.leaseSeconds()) * time.Second, IfMatch: ifMatch})
	if err != nil {
		return Grant{}, err
	}
	return m.grant(h.id, sent, bootSent), nil
}

// grant is the grant of a request sent at sent (bootSent on the boot clock).
// Its callers bound the request's context (call) before they take its send
// time, so that a request that hangs gives up no later than sent +
// RequestTimeout (see BlobSettings.RequestTimeout).
func (m *BlobLeaseManager) grant(id string, sent time.Time, bootSent time.Duration) Grant {
	return Grant{LeaseID: id, Sent: sent, Expires: sent.Add(m.settings.LeaseDuration), bootSent: bootSent}
}

// Renew extends the lease this manager holds. An error matching
// [ErrLeaseLost] means the lease is no longer ours. An [ETagLease] is
// renewed by writing its term record again, so RecordTerm must have
// succeeded since the last Acquire.
func (m *BlobLeaseManager) Renew(ctx context.Context) (Grant, error) {
	if m.Kind() == ETagLease {
		return m.renewByWrite(ctx)
	}
	ctx, cancel := m.call(ctx) // see grant
	defer cancel()
	h := m.id.Load()
	sent, bootSent := time.Now(), m.boot()
	// Azurite lets a non-holder renew an expired lease, reviving the old
	// holder's ID: success only counts when it names our ID, which the
	// storage package checks (another is an error of kind Lost).
	if _, err := m.blobClient.RenewLease(ctx, h.id, blobstore.Call{Op: "renew lease", Lost: lostCodes}); err != nil {
		return Grant{}, m.wrap(err)
	}
	return m.grant(h.id, sent, bootSent), nil
}

// Release gives the lease up so another instance can take it at once. A lease
// that is no longer ours counts as released.
//
// When the outcome is unknown (a timeout, a connection error, a 5xx), the
// release may still reach the server later. The manager then proposes a new
// lease ID from now on, so that a late release cannot end a lease it acquires
// afterwards; the old lease, if the release never arrives, expires. With the
// lease ID file held (see [WithLeaseIDFile]) it moves on to a fresh ID before
// every release, and sends none if the file cannot be written.
func (m *BlobLeaseManager) Release(ctx context.Context) error {
	_, err := m.release(ctx)
	return err
}

// release is Release, and also returns the handle it released with, so that
// a release whose outcome is unknown can be sent again (releaseWith): the
// manager no longer proposes that ID, so a late duplicate can end nothing
// but the lease this one was meant to end.
func (m *BlobLeaseManager) release(ctx context.Context) (*leaseHandle, error) {
	h, err := m.retireLeaseID()
	if err != nil {
		return nil, err
	}
	err = m.releaseWith(ctx, h)
	if err == nil || m.id.Load() != h {
		return h, err // released, or already proposing another ID: see retireLeaseID
	}
	m.newLeaseID()
	return h, err
}

// releaseWith sends one release with h's ID. A lease that is no longer ours
// counts as released.
func (m *BlobLeaseManager) releaseWith(ctx context.Context, h *leaseHandle) error {
	err := m.blobClient.ReleaseLease(ctx, h.id, blobstore.Call{Op: "release lease", Lost: lostCodes})
	if err == nil {
		return nil
	}
	err = m.wrap(err)
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	return err
}

// Break ends whoever's lease is on the blob, for operators: after period
// (rounded down to whole seconds, 0 to 60 s; 0 breaks at once) nobody holds
// it and any instance can acquire it. During the period the holder's next
// renewal fails and its leader func's context is cancelled. Use at least
// [BlobLeaseManager.SafeBreakPeriod] unless the holder is known to be dead
// or connected: with a shorter period another instance may lead before the
// holder has noticed. It returns how long until the lease is broken; a blob with no
// lease gives 0 and no error.
//
// No period is safe for an [ETagLease]: Azure accepts the holder's writes
// while its lease is breaking, so it learns of the break only when the
// period ends, and a holder cut off from storage acts until its own
// deadline, up to LeaseDuration (hours, perhaps) after its last renewal.
// Break one with [BlobLeaseManager.BreakWhenSilent]; Break it at once
// (period 0) only if its holder is dead, or connected (it stops at its
// next renewal, within RenewInterval, and another instance may lead
// meanwhile).
//
// It reads the blob first (two requests), and never breaks one that says it
// is another role's (a ShardOwner's session or shard): it returns a
// [*RecordError] naming the role. The break is conditional on the blob being
// unchanged since that read. An ETag lease's holder rewrites the blob at
// every renewal, so when the blob changed meanwhile Break reads it again,
// and breaks again while the term it first read, recorded and running,
// still holds the lease, up to 5 times in all. It breaks no other term: an
// error matching [ErrLeaseHeld] means the blob changed otherwise meanwhile
// (the lease ended, another took it, or its holder had recorded no term
// yet), or the holder renewed at every attempt.
func (m *BlobLeaseManager) Break(ctx context.Context, period time.Duration) (time.Duration, error) {
	if period < 0 || period > 60*time.Second {
		return 0, fmt.Errorf("leaderelection: break period must be from 0 to 60s, got %v", period)
	}
	var first LeaseInfo
	for attempt := 1; ; attempt++ {
		info, err := m.Inspect(ctx)
		switch {
		case err != nil:
			return 0, err
		case attempt > 1 && !sameRunningTerm(first, info):
			return 0, &StorageError{Op: "break lease", Container: m.container, Blob: m.blob,
				detail: "the blob changed after it was read, and not by a renewal of a recorded term (the lease ended, another took it, or its holder had recorded no term yet): read it again", kind: ErrLeaseHeld}
		case !info.Exists || !info.Held():
			return 0, nil
		case info.Role != "" && info.Role != m.role:
			return 0, foreignRole(m.container, m.blob, info.Role, m.role)
		case attempt == 1:
			first = info
		}
		left, err := m.breakLease(ctx, period, info.ETag)
		switch {
		case !errors.Is(err, ErrLeaseHeld):
			return left, err
		case attempt == breakAttempts:
			return 0, fmt.Errorf("%w (the holder renewed its lease before each of %d breaks)", err, breakAttempts)
		}
	}
}

// sameRunningTerm reports whether b shows the term a showed, recorded and
// running in both (held, not ended, its holder's record its own): what a
// renewal of an ETag lease leaves as it was, though it rewrites the blob.
func sameRunningTerm(a, b LeaseInfo) bool {
	running := func(i LeaseInfo) bool {
		return i.Held() && i.Leader.Number > 0 && i.LeaderEnded.IsZero() && i.RecordError == nil
	}
	return running(a) && running(b) && a.Leader.Number == b.Leader.Number && a.Leader.Identity == b.Leader.Identity
}

// breakAttempts bounds Break's reads again after its break found the blob
// changed: a live ETag holder rewrites it once per RenewInterval (at least
// 500 ms), and a read and a break take three round trips, so a second
// attempt nearly always lands.
const breakAttempts = 5

// SafeBreakPeriod is the shortest break period that never lets another
// instance lead while the holder may still act: the LeaseDuration. A break
// shortens the lease on the server; a holder that cannot reach storage (the
// usual reason to break) does not learn of it and keeps its context until
// its own safety deadline, LeaseDuration after its last renewal was sent. A
// break period of at least LeaseDuration ends the lease no earlier than
// that, while refusing the holder's renewals at once, so a live holder stops
// within RenewInterval + StopMargin and a stuck one cannot renew any more.
//
// It is a native lease's rule, derived from this manager's settings: an
// [ETagLease] has no safe break period (see Break), and for one it returns
// the LeaseDuration all the same, which Break refuses above 60 s. Any native
// lease lasts at most 60 s, so a 60 s period is safe for every one.
func (m *BlobLeaseManager) SafeBreakPeriod() time.Duration {
	return m.settings.LeaseDuration
}

func (m *BlobLeaseManager) breakLease(ctx context.Context, period time.Duration, etag azcore.ETag) (time.Duration, error) {
	remaining, err := m.blobClient.BreakLease(ctx, blobstore.BreakOptions{
		Call: blobstore.Call{Op: "break lease", Held: []string{blobstore.ConditionNotMet}}, Period: period, IfMatch: etag})
	if err != nil {
		if blobstore.HasCode(err, blobstore.LeaseNotPresentWithLeaseOperation, blobstore.BlobNotFound, blobstore.ContainerNotFound) {
			return 0, nil
		}
		return 0, m.wrap(err)
	}
	return remaining, nil
}

// Inspect reads the lease's state and the last leader's record from the
// server. It needs only read access and holds nothing: followers and
// operators use it to see who leads and since when.
func (m *BlobLeaseManager) Inspect(ctx context.Context) (LeaseInfo, error) {
	info, _, err := m.inspect(ctx)
	return info, err
}

// inspect is Inspect, also returning the blob's metadata as read (nil if
// the blob does not exist).
func (m *BlobLeaseManager) inspect(ctx context.Context) (LeaseInfo, map[string]*string, error) {
	props, err := m.blobClient.Properties(ctx, blobstore.Call{Op: "get blob properties"})
	received := time.Now()
	if blobstore.HasCode(err, blobstore.BlobNotFound, blobstore.ContainerNotFound) {
		return LeaseInfo{State: lease.StateTypeAvailable, Status: lease.StatusTypeUnlocked, Received: received}, nil, nil
	}
	if err != nil {
		return LeaseInfo{}, nil, m.wrap(err)
	}
	info := LeaseInfo{Exists: true}
	info.State, info.Status, info.Duration = leaseOf(props)
	observed(&info, props, received)
	m.read(&info, readRecord(m.container, m.blob, props.Metadata))
	return info, props.Metadata, nil
}

// read fills in what the record says, and raises the floor to its term
// (and what it knows of the blob's leases: termFloor.remember).
func (m *BlobLeaseManager) read(info *LeaseInfo, r record) {
	r.fill(info)
	m.floor.remember(r)
}

// leaseOf is what props say of the lease, as a LeaseInfo's fields say it
// (their types, the SDK's, are the public API's).
func leaseOf(props blobstore.Props) (lease.StateType, lease.StatusType, lease.DurationType) {
	return lease.StateType(props.LeaseState), lease.StatusType(props.LeaseStatus), lease.DurationType(props.LeaseDuration)
}

// The lease states and durations the library tells apart, as a LeaseInfo's
// fields carry them.
const (
	stateAvailable   = lease.StateTypeAvailable
	stateLeased      = lease.StateTypeLeased
	stateBroken      = lease.StateTypeBroken
	durationFixed    = lease.DurationTypeFixed
	durationInfinite = lease.DurationTypeInfinite
)

// ensureBlob creates the container and the empty lease blob if they are
// missing. Many instances may start at once: both creations are conditional
// and "already exists" is success.
func (m *BlobLeaseManager) ensureBlob(ctx context.Context) error {
	_, err := m.createBlob(ctx)
	if blobstore.HasCode(err, blobstore.ContainerNotFound) {
		if err := m.createContainer(ctx); err != nil {
			return err
		}
		_, err = m.createBlob(ctx)
	}
	if blobstore.HasCode(err, blobstore.ContainerNotFound, blobstore.ContainerBeingDeleted) {
		// Deleted again just after we created it, or still being deleted:
		// it can be created again later.
		return &StorageError{Op: "create lease blob", Container: m.container, Blob: m.blob,
			StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
	}
	if err != nil {
		return m.wrap(err)
	}
	return nil
}

// createBlob creates the lease blob, empty, unless it exists: it returns the
// ETag of the blob it created, or "" if another created it first. Its error
// is the storage package's, for the caller to wrap.
func (m *BlobLeaseManager) createBlob(ctx context.Context) (azcore.ETag, error) {
	floor := m.floor.seed()
	etag, err := m.blobClient.Create(ctx, blobstore.WriteOptions{Call: blobstore.Call{Op: "create lease blob"},
		Metadata: m.seedMetadata(floor, floor > 0)})
	switch {
	case err == nil && m.settle > 0 && floor > 0:
		// A blob this instance saw terms on was deleted under the
		// fleet: its leader, if cut off from storage, may still act
		// until its deadline, which the settle wait outlasts.
		m.logger.Warn("leaderelection: the lease blob was gone (deleted under a running fleet): created it again, seeded with the highest term seen; no new term is recorded on it until it has stood unchanged for the settle wait (a quorum's leader writes its running term there at once)",
			"container", m.container, "blob", m.blob, "term", floor, "settleFor", m.settleFor(true, 0))
		return etag, nil
	case err == nil:
		// A mutex's blob is created once for a fleet; a session's, at
		// every start of one, which its own line says.
		level := slog.LevelInfo
		if m.role == RoleSession {
			level = slog.LevelDebug
		}
		m.logger.Log(ctx, level, "leaderelection: created lease blob", "container", m.container, "blob", m.blob)
		return etag, nil
	case blobstore.HasCode(err, blobstore.BlobAlreadyExists, blobstore.ConditionNotMet, blobstore.LeaseIDMissing):
		return "", nil // another instance created it first, and may hold its lease already
	}
	return "", err
}

func (m *BlobLeaseManager) createContainer(ctx context.Context) error {
	err := m.containerClient.CreateContainer(ctx, blobstore.Call{Op: "create container"})
	switch {
	case err == nil && m.settle > 0 && m.floor.seed() > 0:
		m.logger.Warn("leaderelection: the container was gone (deleted under a running fleet): created it again", "container", m.container)
		return nil
	case err == nil:
		m.logger.Info("leaderelection: created container", "container", m.container)
		return nil
	case blobstore.HasCode(err, blobstore.ContainerAlreadyExists):
		return nil
	case blobstore.HasCode(err, blobstore.ContainerBeingDeleted):
		// Azure refuses to recreate a container for about 30 s after it
		// was deleted: that passes.
		return &StorageError{Op: "create container", Container: m.container, Blob: m.blob,
			StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: sdkError(err)}
	}
	return m.wrap(err)
}

// statusCode, errorCode and sdkError are the HTTP status, the Azure error
// code and the SDK's error of err, a failed request of the storage package:
// what a StorageError made of it carries, and unwraps to.
func statusCode(err error) int {
	var be *blobstore.Error
	if errors.As(err, &be) {
		return be.Status
	}
	return 0
}

func errorCode(err error) string {
	var be *blobstore.Error
	if errors.As(err, &be) {
		return be.Code
	}
	return ""
}

func sdkError(err error) error {
	var be *blobstore.Error
	if errors.As(err, &be) {
		return be.Err
	}
	return err
}

// CloseIdleConnections closes the idle pooled connections of the HTTP
// transport the library built for this manager, and so their goroutines. The
// library builds one when the settings bring no transport of their own
// (ClientOptions nil or without a Transport, and no Client); for a caller's
// transport or Client it does nothing: that pool is the caller's to manage.
//
// [BlobDistributedMutex.RunTaskWhenMutexAcquired] calls it when it returns.
// Callers who use the manager directly call it when they are done with it
// (a later request simply opens a new connection). It is safe to call at any
// time, concurrently with requests: connections in use are not affected.
func (m *BlobLeaseManager) CloseIdleConnections() {
	m.containerClient.CloseIdleConnections()
}

// config, bootClock, partsHeldWhenLost and giveBack are the term engine's
// view of the manager (termLease, termrun.go).
func (m *BlobLeaseManager) config() BlobSettings  { return m.settings }
func (m *BlobLeaseManager) bootClock() clock.Boot { return m.boot }

func (m *BlobLeaseManager) partsHeldWhenLost() bool { return false }

func (m *BlobLeaseManager) giveBack(ctx context.Context) error {
	h, err := m.retireLeaseID()
	if err != nil {
		return err
	}
	return m.giveBackWith(ctx, h)
}

// giveBackWith releases the lease held under h, a handle already retired
// (see retireLeaseID), sent again while its outcome is unknown and
// attempts fail fast, until ctx ends. A manager still proposing h after a
// failure moves on to a fresh ID, as Release does. A quorum's accounts
// retire their handles together (quorum.go's Q4), then each gives back its
// own.
func (m *BlobLeaseManager) giveBackWith(ctx context.Context, h *leaseHandle) error {
	err := m.releaseWith(ctx, h)
	if err != nil {
		m.id.CompareAndSwap(h, &leaseHandle{id: uuid.NewString()})
	}
	for errors.Is(err, ErrTransient) && clock.Sleep(ctx, m.settings.retryDelay()) {
		err = m.releaseWith(ctx, h)
	}
	return err
}
