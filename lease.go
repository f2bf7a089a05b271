package leaderelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/google/uuid"
)

// BlobLeaseManager acquires, renews, releases and breaks the lease on one blob.
// [BlobDistributedMutex] uses it; it is exported for callers who want to drive
// the lease themselves. Every call is bounded by BlobSettings.RequestTimeout
// (or an earlier deadline on its context) and makes exactly one request: the
// SDK's own retries are turned off, so a call never outlives the time the
// lease has left. Its methods are safe for concurrent use.
//
// Every storage failure it returns is a [*StorageError] matching one of
// [ErrLeaseHeld], [ErrLeaseLost], [ErrTransient] or [ErrPermanent]; an invalid
// argument is a plain error, and nothing is sent.
type BlobLeaseManager struct {
	settings  BlobSettings // with defaults applied
	container string
	blob      string
	// id is the lease ID proposed and its client; replaced after a release
	// whose outcome is unknown (see Release).
	id atomic.Pointer[leaseHandle]

	containerClient *container.Client
	blobClient      *blockblob.Client

	secretRedactor
	logger  *slog.Logger
	reached atomic.Bool // the account has answered at least once
	idFile  leaseIDFile // see WithLeaseIDFile, in resume.go
}

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
	Expires time.Time
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
	// Leader is the last leader's term (its LeaseID is not readable and
	// stays empty). While Held() it is the current leader's.
	Leader Term
}

// Held reports whether someone holds the lease: it is leased, or breaking
// (its holder still acts until the break period ends).
func (i LeaseInfo) Held() bool {
	return i.State == lease.StateTypeLeased || i.State == lease.StateTypeBreaking
}

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
	cc, red, err := settings.containerClient()
	if err != nil {
		return nil, err
	}
	bc := cc.NewBlockBlobClient(settings.Blob)
	m := &BlobLeaseManager{
		settings:        settings,
		container:       settings.Container,
		blob:            settings.Blob,
		containerClient: cc,
		blobClient:      bc,
		secretRedactor:  red,
		logger:          o.logger,
		idFile:          leaseIDFile{path: o.leaseIDFile},
	}
	if err := m.newLeaseID(); err != nil {
		return nil, err
	}
	return m, nil
}

// leaseHandle is a proposed lease ID and the client that proposes it.
type leaseHandle struct {
	id     string
	client *lease.BlobClient
}

// newLeaseID makes the manager propose a fresh GUID from now on.
func (m *BlobLeaseManager) newLeaseID() error { return m.proposeLeaseID(uuid.NewString()) }

// proposeLeaseID makes the manager propose id from now on.
func (m *BlobLeaseManager) proposeLeaseID(id string) error {
	lc, err := lease.NewBlobClient(m.blobClient, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return fmt.Errorf("leaderelection: building the lease client: %s", m.redact(err.Error()))
	}
	m.id.Store(&leaseHandle{id: id, client: lc})
	return nil
}

// LeaseID is the GUID this manager proposes as the lease ID. It stays the
// same until a release fails (see Release), so an acquire whose response was
// lost can be retried: the server answers the same ID's second acquire with
// success. With [WithLeaseIDFile] it is the file's while the file is held,
// and changes at every release.
func (m *BlobLeaseManager) LeaseID() string { return m.id.Load().id }

// Settings returns the settings in force, with defaults applied.
func (m *BlobLeaseManager) Settings() BlobSettings { return m.settings }

// Lease operation error codes. Any of them on a renew means the lease is no
// longer ours: released, broken, expired and taken, or its blob is gone.
var lostCodes = []string{
	string(bloberror.LeaseIDMismatchWithLeaseOperation),
	string(bloberror.LeaseIsBrokenAndCannotBeRenewed),
	string(bloberror.LeaseIsBreakingAndCannotBeChanged),
	string(bloberror.LeaseIsBreakingAndCannotBeAcquired),
	string(bloberror.LeaseNotPresentWithLeaseOperation),
	string(bloberror.LeaseLost),
	string(bloberror.LeaseAlreadyBroken),
	string(bloberror.LeaseIDMissing),
	string(bloberror.LeaseIDMismatchWithBlobOperation),
	string(bloberror.LeaseNotPresentWithBlobOperation),
	string(bloberror.BlobNotFound),
	string(bloberror.ContainerNotFound),
}

// heldCodes mean another instance holds the lease.
var heldCodes = []string{
	string(bloberror.LeaseAlreadyPresent),
	string(bloberror.LeaseIsBreakingAndCannotBeAcquired),
}

// call bounds ctx by RequestTimeout and turns off the SDK's retries: their
// defaults (3 retries from 0.8 s, no per-try timeout) can hold a call for
// 10 s or, against a silent server, forever. We retry on our own schedule.
func (m *BlobLeaseManager) call(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx = policy.WithRetryOptions(ctx, policy.RetryOptions{MaxRetries: -1})
	return context.WithTimeout(ctx, m.settings.RequestTimeout)
}

// Acquire tries once to take the lease, creating the container and the blob
// first if they are missing. It returns an error matching [ErrLeaseHeld] when
// another instance holds the lease.
func (m *BlobLeaseManager) Acquire(ctx context.Context) (Grant, error) {
	g, err := m.acquire(ctx)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		if err := m.ensureBlob(ctx); err != nil {
			return Grant{}, err
		}
		g, err = m.acquire(ctx)
	}
	if err != nil {
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			// Deleted again between creation and acquire: try again later.
			return Grant{}, &StorageError{Op: "acquire lease", Container: m.container, Blob: m.blob,
				StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: err}
		}
		return Grant{}, m.classify("acquire lease", err, heldCodes, nil)
	}
	return g, nil
}

func (m *BlobLeaseManager) acquire(ctx context.Context) (Grant, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	h := m.id.Load()
	sent := time.Now()
	resp, err := h.client.AcquireLease(ctx, int32(m.settings.LeaseDuration/time.Second), nil)
	if err != nil {
		return Grant{}, err
	}
	m.reached.Store(true)
	if resp.LeaseID == nil || *resp.LeaseID != h.id {
		return Grant{}, &StorageError{Op: "acquire lease", Container: m.container, Blob: m.blob,
			detail: "the server answered with another lease ID", kind: ErrLeaseHeld}
	}
	return m.grant(h.id, sent), nil
}

func (m *BlobLeaseManager) grant(id string, sent time.Time) Grant {
	return Grant{LeaseID: id, Sent: sent, Expires: sent.Add(m.settings.LeaseDuration)}
}

// Renew extends the lease this manager holds. An error matching
// [ErrLeaseLost] means the lease is no longer ours.
func (m *BlobLeaseManager) Renew(ctx context.Context) (Grant, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	h := m.id.Load()
	sent := time.Now()
	resp, err := h.client.RenewLease(ctx, nil)
	if err != nil {
		return Grant{}, m.classify("renew lease", err, nil, lostCodes)
	}
	// Azurite lets a non-holder renew an expired lease, reviving the old
	// holder's ID: success only counts when it names our ID.
	if resp.LeaseID == nil || *resp.LeaseID != h.id {
		return Grant{}, &StorageError{Op: "renew lease", Container: m.container, Blob: m.blob,
			detail: "the server answered with another lease ID", kind: ErrLeaseLost}
	}
	return m.grant(h.id, sent), nil
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
	h, err := m.retireLeaseID()
	if err != nil {
		return err
	}
	ctx, cancel := m.call(ctx)
	defer cancel()
	_, err = h.client.ReleaseLease(ctx, nil)
	if err == nil {
		return nil
	}
	err = m.classify("release lease", err, nil, lostCodes)
	if errors.Is(err, ErrLeaseLost) {
		return nil
	}
	if m.id.Load() != h {
		return err // already proposing another ID: see retireLeaseID
	}
	if nerr := m.newLeaseID(); nerr != nil {
		return errors.Join(err, nerr)
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
func (m *BlobLeaseManager) Break(ctx context.Context, period time.Duration) (time.Duration, error) {
	if period < 0 || period > 60*time.Second {
		return 0, fmt.Errorf("leaderelection: break period must be from 0 to 60s, got %v", period)
	}
	return m.breakLease(ctx, period)
}

// SafeBreakPeriod is the shortest break period that never lets another
// instance lead while the holder may still act: the LeaseDuration. A break
// shortens the lease on the server; a holder that cannot reach storage (the
// usual reason to break) does not learn of it and keeps its context until
// its own safety deadline, LeaseDuration after its last renewal was sent. A
// break period of at least LeaseDuration ends the lease no earlier than
// that, while refusing the holder's renewals at once, so a live holder stops
// within RenewInterval + StopMargin and a stuck one cannot renew any more.
func (m *BlobLeaseManager) SafeBreakPeriod() time.Duration {
	return m.settings.LeaseDuration
}

func (m *BlobLeaseManager) breakLease(ctx context.Context, period time.Duration) (time.Duration, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	secs := int32(period / time.Second)
	resp, err := m.id.Load().client.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: &secs})
	if err != nil {
		if bloberror.HasCode(err, bloberror.LeaseNotPresentWithLeaseOperation, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			return 0, nil
		}
		return 0, m.classify("break lease", err, nil, nil)
	}
	var remaining time.Duration
	if resp.LeaseTime != nil {
		remaining = time.Duration(*resp.LeaseTime) * time.Second
	}
	return remaining, nil
}

// Inspect reads the lease's state and the last leader's record from the
// server. It needs only read access and holds nothing: followers and
// operators use it to see who leads and since when.
func (m *BlobLeaseManager) Inspect(ctx context.Context) (LeaseInfo, error) {
	props, err := m.properties(ctx)
	if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
		return LeaseInfo{State: lease.StateTypeAvailable, Status: lease.StatusTypeUnlocked}, nil
	}
	if err != nil {
		return LeaseInfo{}, m.classify("get blob properties", err, nil, nil)
	}
	info := LeaseInfo{Exists: true}
	if props.LeaseState != nil {
		info.State = *props.LeaseState
	}
	if props.LeaseStatus != nil {
		info.Status = *props.LeaseStatus
	}
	if props.LeaseDuration != nil {
		info.Duration = *props.LeaseDuration
	}
	if info.Leader, err = termFromMetadata(props.Metadata); err != nil {
		return info, &StorageError{Op: "get blob properties", Container: m.container, Blob: m.blob, detail: err.Error(), kind: ErrPermanent}
	}
	return info, nil
}

func (m *BlobLeaseManager) properties(ctx context.Context) (blob.GetPropertiesResponse, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	props, err := m.blobClient.GetProperties(ctx, nil)
	if err == nil {
		m.reached.Store(true)
	}
	return props, err
}

// RecordTerm writes a new term into the blob's metadata, under the lease this
// manager must hold: the previous term's number plus one, identity, and now.
// Only the lease holder can write the metadata, and the write is conditional
// on the blob being unchanged since it was read, so no two terms get the same
// number and numbers only grow. An error matching [ErrLeaseLost] means the
// lease is no longer ours.
func (m *BlobLeaseManager) RecordTerm(ctx context.Context, identity string) (Term, error) {
	if err := checkIdentity(identity); err != nil {
		return Term{}, err
	}
	props, err := m.properties(ctx)
	if err != nil {
		return Term{}, m.classify("read term", err, nil, lostCodes)
	}
	prev, err := termFromMetadata(props.Metadata)
	if err != nil {
		return Term{}, &StorageError{Op: "read term", Container: m.container, Blob: m.blob, detail: err.Error(), kind: ErrPermanent}
	}
	id := m.LeaseID()
	t := Term{Number: prev.Number + 1, Identity: identity, LeaseID: id, Since: time.Now().UTC()}
	number, since := strconv.FormatInt(t.Number, 10), t.Since.Format(time.RFC3339Nano)
	ctx, cancel := m.call(ctx)
	defer cancel()
	_, err = m.blobClient.SetMetadata(ctx, map[string]*string{metaIdentity: &identity, metaTerm: &number, metaSince: &since},
		&blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag},
		}})
	if err != nil {
		// ConditionNotMet: the blob changed since we read it. Only a lease
		// holder can write it, so that was our own earlier attempt, answered
		// too late: read again and retry. (Had the lease passed to another,
		// the write would fail on our lease ID.)
		if bloberror.HasCode(err, bloberror.ConditionNotMet) {
			return Term{}, &StorageError{Op: "write term", Container: m.container, Blob: m.blob,
				StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: err}
		}
		return Term{}, m.classify("write term", err, nil, lostCodes)
	}
	return t, nil
}

// termFromMetadata reads a leader's record. A blob with none is at term 0.
func termFromMetadata(md map[string]*string) (Term, error) {
	get := func(key string) string {
		for k, v := range md {
			if strings.EqualFold(k, key) && v != nil {
				return *v
			}
		}
		return ""
	}
	var t Term
	t.Identity = get(metaIdentity)
	if n := get(metaTerm); n != "" {
		num, err := strconv.ParseInt(n, 10, 64)
		if err != nil || num < 0 {
			return Term{}, fmt.Errorf("metadata %s=%q is not a term number: the blob is reserved for the lease", metaTerm, n)
		}
		t.Number = num
	}
	if s := get(metaSince); s != "" {
		if since, err := time.Parse(time.RFC3339Nano, s); err == nil {
			t.Since = since
		}
	}
	return t, nil
}

// ensureBlob creates the container and the empty lease blob if they are
// missing. Many instances may start at once: both creations are conditional
// and "already exists" is success.
func (m *BlobLeaseManager) ensureBlob(ctx context.Context) error {
	err := m.createBlob(ctx)
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		if err := m.createContainer(ctx); err != nil {
			return err
		}
		err = m.createBlob(ctx)
	}
	if bloberror.HasCode(err, bloberror.ContainerNotFound, bloberror.ContainerBeingDeleted) {
		// Deleted again just after we created it, or still being deleted:
		// it can be created again later.
		return &StorageError{Op: "create lease blob", Container: m.container, Blob: m.blob,
			StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: err}
	}
	if err != nil {
		return m.classify("create lease blob", err, nil, nil)
	}
	return nil
}

func (m *BlobLeaseManager) createBlob(ctx context.Context) error {
	ctx, cancel := m.call(ctx)
	defer cancel()
	any := azcore.ETagAny
	_, err := m.blobClient.Upload(ctx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
		AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: &any}},
	})
	switch {
	case err == nil:
		m.logger.Info("leaderelection: created lease blob", "container", m.container, "blob", m.blob)
		return nil
	case bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet, bloberror.LeaseIDMissing):
		return nil // another instance created it first, and may hold its lease already
	}
	return err
}

func (m *BlobLeaseManager) createContainer(ctx context.Context) error {
	ctx, cancel := m.call(ctx)
	defer cancel()
	_, err := m.containerClient.Create(ctx, nil)
	switch {
	case err == nil:
		m.logger.Info("leaderelection: created container", "container", m.container)
		return nil
	case bloberror.HasCode(err, bloberror.ContainerAlreadyExists):
		return nil
	case bloberror.HasCode(err, bloberror.ContainerBeingDeleted):
		// Azure refuses to recreate a container for about 30 s after it
		// was deleted: that passes.
		return &StorageError{Op: "create container", Container: m.container, Blob: m.blob,
			StatusCode: statusCode(err), ErrorCode: errorCode(err), kind: ErrTransient, err: err}
	}
	return m.classify("create container", err, nil, nil)
}

func statusCode(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}
