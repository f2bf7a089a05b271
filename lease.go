package leaderelection

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
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
// Every error it returns is a [*StorageError] matching one of [ErrLeaseHeld],
// [ErrLeaseLost], [ErrTransient] or [ErrPermanent].
type BlobLeaseManager struct {
	settings  BlobSettings // with defaults applied
	container string
	blob      string
	leaseID   string

	containerClient *container.Client
	blobClient      *blockblob.Client
	leaseClient     *lease.BlobClient

	secretRedactor
	logger *slog.Logger
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

// LeaseInfo is the state of a lease as the server reports it.
type LeaseInfo struct {
	State    lease.StateType    // available, leased, expired, breaking or broken
	Status   lease.StatusType   // locked or unlocked
	Duration lease.DurationType // fixed or infinite; "" when not leased
}

// NewBlobLeaseManager validates settings and builds the clients. It makes no
// network call: the container and the blob are created by the first Acquire
// that finds them missing.
func NewBlobLeaseManager(settings BlobSettings, opts ...Option) (*BlobLeaseManager, error) {
	if err := settings.Validate(); err != nil {
		return nil, err
	}
	o := buildOptions(opts)
	settings = settings.withDefaults()
	cc, red, err := settings.containerClient()
	if err != nil {
		return nil, err
	}
	bc := cc.NewBlockBlobClient(settings.Blob)
	id := uuid.NewString()
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return nil, fmt.Errorf("leaderelection: building the lease client: %s", red.redact(err.Error()))
	}
	return &BlobLeaseManager{
		settings:        settings,
		container:       settings.Container,
		blob:            settings.Blob,
		leaseID:         id,
		containerClient: cc,
		blobClient:      bc,
		leaseClient:     lc,
		secretRedactor:  red,
		logger:          o.logger,
	}, nil
}

// LeaseID is the GUID this manager proposes as the lease ID. It stays the
// same for the manager's life, so an acquire whose response was lost can be
// retried: the server answers the same ID's second acquire with success.
func (m *BlobLeaseManager) LeaseID() string { return m.leaseID }

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
				StatusCode: 404, ErrorCode: errorCode(err), kind: ErrTransient, err: err}
		}
		return Grant{}, m.classify("acquire lease", err, heldCodes, nil)
	}
	return g, nil
}

func (m *BlobLeaseManager) acquire(ctx context.Context) (Grant, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	sent := time.Now()
	resp, err := m.leaseClient.AcquireLease(ctx, int32(m.settings.LeaseDuration/time.Second), nil)
	if err != nil {
		return Grant{}, err
	}
	if resp.LeaseID == nil || *resp.LeaseID != m.leaseID {
		return Grant{}, &StorageError{Op: "acquire lease", Container: m.container, Blob: m.blob,
			detail: "the server answered with another lease ID", kind: ErrLeaseHeld}
	}
	return m.grant(sent), nil
}

func (m *BlobLeaseManager) grant(sent time.Time) Grant {
	return Grant{LeaseID: m.leaseID, Sent: sent, Expires: sent.Add(m.settings.LeaseDuration)}
}

// Renew extends the lease this manager holds. An error matching
// [ErrLeaseLost] means the lease is no longer ours.
func (m *BlobLeaseManager) Renew(ctx context.Context) (Grant, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	sent := time.Now()
	resp, err := m.leaseClient.RenewLease(ctx, nil)
	if err != nil {
		return Grant{}, m.classify("renew lease", err, nil, lostCodes)
	}
	// Azurite lets a non-holder renew an expired lease, reviving the old
	// holder's ID: success only counts when it names our ID.
	if resp.LeaseID == nil || *resp.LeaseID != m.leaseID {
		return Grant{}, &StorageError{Op: "renew lease", Container: m.container, Blob: m.blob,
			detail: "the server answered with another lease ID", kind: ErrLeaseLost}
	}
	return m.grant(sent), nil
}

// Release gives the lease up so another instance can take it at once. A lease
// that is no longer ours counts as released.
func (m *BlobLeaseManager) Release(ctx context.Context) error {
	ctx, cancel := m.call(ctx)
	defer cancel()
	_, err := m.leaseClient.ReleaseLease(ctx, nil)
	if err != nil {
		err = m.classify("release lease", err, nil, lostCodes)
		if errors.Is(err, ErrLeaseLost) {
			return nil
		}
	}
	return err
}

// Break ends whoever's lease is on the blob, for operators: after period
// (rounded down to whole seconds, 0 to 60 s; 0 breaks at once) nobody holds
// it and any instance can acquire it. The holder's next renewal fails and
// its leader func's context is cancelled. It returns how long until the
// lease is broken; a blob with no lease gives 0 and no error.
func (m *BlobLeaseManager) Break(ctx context.Context, period time.Duration) (time.Duration, error) {
	if period < 0 || period > 60*time.Second {
		return 0, fmt.Errorf("leaderelection: break period must be from 0 to 60s, got %v", period)
	}
	ctx, cancel := m.call(ctx)
	defer cancel()
	secs := int32(period / time.Second)
	resp, err := m.leaseClient.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: &secs})
	if err != nil {
		if bloberror.HasCode(err, bloberror.LeaseNotPresentWithLeaseOperation) {
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

// Inspect reads the lease's state from the server. It needs only read access
// and holds nothing.
func (m *BlobLeaseManager) Inspect(ctx context.Context) (LeaseInfo, error) {
	ctx, cancel := m.call(ctx)
	defer cancel()
	props, err := m.blobClient.GetProperties(ctx, nil)
	if err != nil {
		return LeaseInfo{}, m.classify("get blob properties", err, nil, nil)
	}
	var info LeaseInfo
	if props.LeaseState != nil {
		info.State = *props.LeaseState
	}
	if props.LeaseStatus != nil {
		info.Status = *props.LeaseStatus
	}
	if props.LeaseDuration != nil {
		info.Duration = *props.LeaseDuration
	}
	return info, nil
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
	}
	return m.classify("create container", err, nil, nil)
}

func errorCode(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}
