// Package tamper is "another writer" for the fault-injection harnesses
// (packages chaos and shardchaos): it writes what the library must survive
// into the blobs a fleet uses, with the Azure SDK directly: malformed term
// records, the repairs an operator would make of them, deleted blobs and
// containers, and phantom session blobs.
//
// It never breaks a lease, and never writes under a lease it does not hold:
// a record is written only while its blob is unleased (available, expired or
// broken), without a lease ID and on condition of the ETag it has just read,
// so that the server refuses the write if a contender took the lease in
// between (412 LeaseIdMissing) or wrote (412 ConditionNotMet). A blob is
// deleted the same way. One call does what a script that removes the
// container under a running fleet does, and takes a holder's lease with it:
// DeleteContainerNow. Every loop is bounded by a deadline and every
// request by a timeout, and the only traffic is to the URL it is given (a
// local Azurite).
package tamper

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/wire"
)

// The library's blob layout and metadata keys (internal/wire), as another
// writer sees them.
const (
	KeyIdentity = wire.MetaIdentity
	KeyTerm     = wire.MetaTerm
	KeySince    = wire.MetaSince
	KeyEnded    = wire.MetaEnded
	KeyDuration = wire.MetaLeaseDuration
	KeySession  = wire.MetaSession
	KeyOwned    = wire.MetaOwned
	// KeyKind says what wrote a record: KindMutex, KindSession or
	// KindShard. Records the library writes carry it.
	KeyKind = wire.MetaRole

	SessionsDir = wire.SessionsDir // under a ShardOwner's prefix + "/"
	ShardsDir   = wire.ShardsDir
)

// Blob kinds, the values of KeyKind.
const (
	KindMutex   = wire.RoleMutex
	KindSession = wire.RoleSession
	KindShard   = wire.RoleShard
)

// Identity is the identity the other writer's records carry.
const Identity = "another-writer"

// Case is a malformed record.
type Case string

// The malformed records the harnesses write.
const (
	TermGarbage     Case = "term-garbage"     // leaderterm=garbage: not a number
	TermOverflow    Case = "term-overflow"    // leaderterm=9223372036854775807: no successor
	DurationAbsurd  Case = "duration-absurd"  // leaderleaseduration=2562047h: far above 24 h
	DurationGarbage Case = "duration-garbage" // leaderleaseduration=forever: not a duration
)

// Cases are every malformed record, in the order a harness draws them.
var Cases = []Case{TermGarbage, TermOverflow, DurationAbsurd, DurationGarbage}

// BlocksTerm reports whether c's record leaves no next term to take: its
// term does not read, or has no successor. No func may start on a blob
// that carries it. (A record whose declared duration is bad still has a
// term to follow.)
func (c Case) BlocksTerm() bool { return c == TermGarbage || c == TermOverflow }

// Metadata is c's record on a blob of kind k (KindMutex, KindShard), as
// another writer at term after the highest seen would write it, with a
// lease it has released (leaderended set).
func (c Case) Metadata(k string, highest int64, now time.Time) map[string]*string {
	md := Record(k, highest+1, now)
	switch c {
	case TermGarbage:
		md[KeyTerm] = ptr("garbage")
	case TermOverflow:
		md[KeyTerm] = ptr(strconv.FormatInt(1<<63-1, 10))
	case DurationAbsurd:
		md[KeyDuration] = ptr("2562047h")
	case DurationGarbage:
		md[KeyDuration] = ptr("forever")
	}
	return md
}

// Record is a valid record of term n on a blob of kind k, by the other
// writer, whose term has ended: what an operator writes to repair a blob.
func Record(k string, n int64, now time.Time) map[string]*string {
	ts := now.UTC().Format(time.RFC3339Nano)
	return map[string]*string{
		KeyIdentity: ptr(Identity),
		KeyTerm:     ptr(strconv.FormatInt(n, 10)),
		KeySince:    ptr(ts),
		KeyEnded:    ptr(ts),
		KeyDuration: ptr("15s"),
		KeyKind:     ptr(k),
	}
}

func ptr(s string) *string { return &s }

// ParseCase reads a case's name.
func ParseCase(s string) (Case, bool) {
	for _, c := range Cases {
		if string(c) == s {
			return c, true
		}
	}
	return "", false
}

// ErrLeased is returned when the blob stayed leased (or kept changing)
// until the deadline: no moment came to write it as another writer may.
var ErrLeased = errors.New("tamper: the blob stayed leased until the deadline")

// Writer writes into one container of one storage account.
type Writer struct {
	cc      *container.Client
	tr      *http.Transport
	timeout time.Duration // per request

	mu      sync.Mutex
	highest map[string]int64 // blob -> the highest term seen on it
}

// New returns a Writer for container name in the account of conn (a
// connection string to Azurite itself, not to a proxy), each request
// bounded by 2 s and never retried by the SDK: the Writer's own loops
// retry.
func New(conn, name string) (*Writer, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	cc, err := container.NewClientFromConnectionString(conn, name, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: tr}, Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		return nil, err
	}
	return &Writer{cc: cc, tr: tr, timeout: 2 * time.Second, highest: map[string]int64{}}, nil
}

// Close closes the Writer's idle connections.
func (w *Writer) Close() { w.tr.CloseIdleConnections() }

// Observe notes that term n ran on blob (a fleet's func started with it):
// a repair writes a term above every term observed.
func (w *Writer) Observe(blob string, n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if n > w.highest[blob] && n < maxSane {
		w.highest[blob] = n
	}
}

// maxSane bounds the terms a repair takes into account: a term above it
// came from an overflow, not from a fleet counting up.
const maxSane = 1 << 53

// Highest is the highest term observed on blob, or read from a record on
// it that was not the other writer's.
func (w *Writer) Highest(blob string) int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.highest[blob]
}

// Outcome is what one bounded write did.
type Outcome struct {
	Sent  time.Time // when the request that succeeded was sent
	Done  time.Time // and when its answer came
	Tries int       // requests that wrote nothing, for the blob was leased or had just changed (or, for AcquireLate, carried no end mark yet)
	Term  int64     // the term written, for a valid record (0 otherwise)
}

func (w *Writer) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.timeout)
}

// unleased reports whether a lease state lets another writer write (the
// server still checks, atomically: the write carries no lease ID).
func unleased(p blob.GetPropertiesResponse) bool {
	if p.LeaseState == nil {
		return true
	}
	switch *p.LeaseState {
	case lease.StateTypeAvailable, lease.StateTypeExpired, lease.StateTypeBroken:
		return true
	}
	return false
}

// whenUnleased reads blob name every poll until deadline, and calls act
// with each answer that shows it unleased, or with gone set when it does not
// exist (only if gone may be acted on: else a missing blob is retried like
// any failure). act reports whether it is done, and why not. A leased blob,
// or a failed read, is tried again; at deadline it gives up with an error
// matching ErrLeased and the last reason.
func (w *Writer) whenUnleased(ctx context.Context, name string, deadline time.Time, poll time.Duration, out *Outcome,
	actOnGone bool, act func(props blob.GetPropertiesResponse, gone bool) (bool, error)) error {
	bc := w.cc.NewBlobClient(name)
	var last error
	for ; ; out.Tries++ {
		if out.Tries > 0 {
			if time.Now().Add(poll).After(deadline) || !sleep(ctx, poll) {
				return errors.Join(ErrLeased, last, ctx.Err())
			}
		}
		callCtx, cancel := w.call(ctx)
		props, err := bc.GetProperties(callCtx, nil)
		cancel()
		gone := bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound)
		switch {
		case gone && actOnGone:
		case err != nil:
			last = err
			continue
		default:
			w.noteRead(name, props.Metadata)
			if !unleased(props) || props.ETag == nil {
				last = fmt.Errorf("lease %v", deref(props.LeaseState))
				continue
			}
		}
		done, err := act(props, gone)
		if done {
			return nil
		}
		last = err
	}
}

// write polls blob every poll until it is unleased and writes md(highest)
// into it, on condition of the ETag just read; a missing blob is created
// with md (If-None-Match *), unless mustExist. It gives up at deadline.
func (w *Writer) write(ctx context.Context, name string, deadline time.Time, poll time.Duration, mustExist bool, md func(highest int64) (map[string]*string, int64)) (Outcome, error) {
	bc := w.cc.NewBlockBlobClient(name)
	var out Outcome
	err := w.whenUnleased(ctx, name, deadline, poll, &out, !mustExist, func(props blob.GetPropertiesResponse, gone bool) (bool, error) {
		meta, term := md(w.Highest(name))
		callCtx, cancel := w.call(ctx)
		defer cancel()
		out.Sent = time.Now()
		var err error
		if gone {
			_, err = bc.Upload(callCtx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
				Metadata:         meta,
				AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: ptrETag(azcore.ETagAny)}},
			})
		} else {
			_, err = bc.SetMetadata(callCtx, meta, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
				ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag},
			}})
		}
		out.Done = time.Now()
		if err != nil {
			return false, err
		}
		out.Term = term
		w.Observe(name, term)
		return true, nil
	})
	return out, err
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func ptrETag(e azcore.ETag) *azcore.ETag { return &e }

// noteRead takes a record's term into account, unless the other writer
// wrote it (its malformed terms are not the fleet's).
func (w *Writer) noteRead(name string, md map[string]*string) {
	if value(md, KeyIdentity) == Identity {
		return
	}
	if n, err := strconv.ParseInt(value(md, KeyTerm), 10, 64); err == nil {
		w.Observe(name, n)
	}
}

// value reads a metadata key case-insensitively, as the library does.
func value(md map[string]*string, key string) string {
	for k, v := range md {
		if strings.EqualFold(k, key) && v != nil {
			return *v
		}
	}
	return ""
}

// WriteMalformed writes c's record on blob name, of kind k, as soon as the
// blob is unleased (polled every poll), or creates the blob with it; it
// gives up at deadline with an error matching ErrLeased.
func (w *Writer) WriteMalformed(ctx context.Context, name, k string, c Case, deadline time.Time, poll time.Duration) (Outcome, error) {
	return w.write(ctx, name, deadline, poll, false, func(highest int64) (map[string]*string, int64) {
		md := c.Metadata(k, highest, time.Now())
		if c.BlocksTerm() {
			return md, 0
		}
		return md, highest + 1
	})
}

// Repair rewrites blob name's record valid, of kind k, with the term after
// the highest the Writer has seen on it, once the blob is unleased (polled
// every poll); it gives up at deadline with an error matching ErrLeased.
// A blob that has gone is not created again.
func (w *Writer) Repair(ctx context.Context, name, k string, deadline time.Time, poll time.Duration) (Outcome, error) {
	return w.write(ctx, name, deadline, poll, true, func(highest int64) (map[string]*string, int64) {
		return Record(k, highest+1, time.Now()), highest + 1
	})
}

// DeleteBlob deletes blob name as soon as it is unleased (polled every
// poll), without a lease ID and on condition of the ETag just read, so the
// server refuses it while a contender holds the lease. It gives up at
// deadline with an error matching ErrLeased; a blob already gone is not an
// error.
func (w *Writer) DeleteBlob(ctx context.Context, name string, deadline time.Time, poll time.Duration) (Outcome, error) {
	bc := w.cc.NewBlobClient(name)
	var out Outcome
	err := w.whenUnleased(ctx, name, deadline, poll, &out, true, func(props blob.GetPropertiesResponse, gone bool) (bool, error) {
		if gone {
			return true, nil
		}
		callCtx, cancel := w.call(ctx)
		defer cancel()
		out.Sent = time.Now()
		_, err := bc.Delete(callCtx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag},
		}})
		out.Done = time.Now()
		return err == nil || bloberror.HasCode(err, bloberror.BlobNotFound), err
	})
	return out, err
}

// DeleteContainer deletes the container once blob name in it is unleased.
// Deleting a container takes its blobs' leases with it, which would be a
// break; so the Writer first takes the blob's lease itself (an acquire on
// condition of the ETag it just read as unleased: refused if a contender
// took it in between), and deletes the container while it holds it. Polls
// every poll; gives up at deadline with an error matching ErrLeased.
func (w *Writer) DeleteContainer(ctx context.Context, name string, deadline time.Time, poll time.Duration) (Outcome, error) {
	bc := w.cc.NewBlobClient(name)
	id := "00000000-0000-4000-8000-0000000a0e17" // ours: a GUID, as Azure requires
	lc, err := lease.NewBlobClient(bc, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return Outcome{}, err
	}
	var out Outcome
	err = w.whenUnleased(ctx, name, deadline, poll, &out, false, func(props blob.GetPropertiesResponse, _ bool) (bool, error) {
		callCtx, cancel := w.call(ctx)
		_, err := lc.AcquireLease(callCtx, 15, &lease.BlobAcquireOptions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: props.ETag}})
		cancel()
		if err != nil {
			return false, err
		}
		callCtx, cancel = w.call(ctx)
		out.Sent = time.Now()
		_, err = w.cc.Delete(callCtx, nil)
		out.Done = time.Now()
		cancel()
		if err == nil {
			return true, nil
		}
		callCtx, cancel = w.call(ctx)
		_, _ = lc.ReleaseLease(callCtx, nil)
		cancel()
		return false, err
	})
	return out, err
}

// DeleteContainerNow deletes the container at once, whatever leases its
// blobs hold: the server takes them with it, a leader's included, as it does
// for an operator's script that removes the container under a running fleet.
// It tries every poll until deadline; a container already gone is no error.
// The Outcome's Sent is when the delete that did it was sent.
func (w *Writer) DeleteContainerNow(ctx context.Context, deadline time.Time, poll time.Duration) (Outcome, error) {
	var out Outcome
	var last error
	for ; ; out.Tries++ {
		if out.Tries > 0 && (time.Now().Add(poll).After(deadline) || !sleep(ctx, poll)) {
			return out, fmt.Errorf("tamper: delete the container: %w", errors.Join(last, ctx.Err()))
		}
		callCtx, cancel := w.call(ctx)
		out.Sent = time.Now()
		_, err := w.cc.Delete(callCtx, nil)
		out.Done = time.Now()
		cancel()
		if err == nil || bloberror.HasCode(err, bloberror.ContainerNotFound) {
			return out, nil
		}
		last = err
	}
}

// Phantom is a blob under a ShardOwner's sessions/ that is not a session.
type Phantom struct {
	Name    string // the blob's full name
	LeaseID string // the lease the Writer holds on it; "" none
}

// AcquireLate waits until blob name is unleased (its holder's lease broken
// or released) and its record carries the end mark (KeyEnded: its holder
// judged dead by the others, not only its lease ended; see the library's
// shards.go, D4), then acquires its lease, infinite, with leaseID: what an
// acquire the holder sent long before, delayed in the network, does when it
// reaches the server at last. It gives up at deadline (ErrLeased, or
// ErrNotMarked if the blob was last seen unleased without the mark), or
// when the blob is gone (ErrGone). The Outcome's Sent is when the acquire
// that took the lease was sent.
func (w *Writer) AcquireLate(ctx context.Context, name, leaseID string, deadline time.Time, poll time.Duration) (Outcome, error) {
	var out Outcome
	lc, err := lease.NewBlobClient(w.cc.NewBlobClient(name), &lease.BlobClientOptions{LeaseID: &leaseID})
	if err != nil {
		return out, err
	}
	wasGone := false
	err = w.whenUnleased(ctx, name, deadline, poll, &out, true, func(props blob.GetPropertiesResponse, gone bool) (bool, error) {
		if gone {
			wasGone = true
			return true, nil
		}
		if value(props.Metadata, KeyEnded) == "" {
			return false, ErrNotMarked
		}
		callCtx, cancel := w.call(ctx)
		defer cancel()
		out.Sent = time.Now()
		_, err := lc.AcquireLease(callCtx, -1, nil)
		out.Done = time.Now()
		return err == nil, err
	})
	switch {
	case err == nil && wasGone:
		return out, ErrGone
	case errors.Is(err, ErrNotMarked):
		return out, ErrNotMarked // not ErrLeased: it was last seen unleased
	}
	return out, err
}

// ErrNotMarked is returned by AcquireLate when the blob was last seen
// unleased, without the end mark, at its deadline.
var ErrNotMarked = errors.New("tamper: the blob stayed without the end mark until the deadline")

// ErrGone is returned by AcquireLate when the blob is gone.
var ErrGone = errors.New("tamper: the blob is gone")

// Phantoms creates two phantom session blobs under prefix (a ShardOwner's
// BlobSettings.Blob): an empty one, and one that carries a mutex's record
// and an infinite lease the Writer holds. tag makes their names unique.
func (w *Writer) Phantoms(ctx context.Context, prefix, tag string) ([]Phantom, error) {
	dir := prefix + "/" + SessionsDir
	empty := Phantom{Name: dir + "phantom-" + tag + "-empty"}
	leased := Phantom{Name: dir + "phantom-" + tag + "-leased", LeaseID: "00000000-0000-4000-8000-00000000f00d"}
	var made []Phantom
	for _, p := range []Phantom{empty, leased} {
		var md map[string]*string
		if p.LeaseID != "" {
			md = Record(KindMutex, 7, time.Now())
			delete(md, KeyEnded)
		}
		bc := w.cc.NewBlockBlobClient(p.Name)
		callCtx, cancel := w.call(ctx)
		_, err := bc.Upload(callCtx, streaming.NopCloser(bytes.NewReader(nil)), &blockblob.UploadOptions{
			Metadata:         md,
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: ptrETag(azcore.ETagAny)}},
		})
		cancel()
		if err != nil {
			return made, fmt.Errorf("tamper: create %s: %w", p.Name, err)
		}
		if p.LeaseID != "" {
			lc, err := lease.NewBlobClient(w.cc.NewBlobClient(p.Name), &lease.BlobClientOptions{LeaseID: &p.LeaseID})
			if err != nil {
				return made, err
			}
			callCtx, cancel := w.call(ctx)
			_, err = lc.AcquireLease(callCtx, -1, nil)
			cancel()
			if err != nil {
				made = append(made, Phantom{Name: p.Name})
				return made, fmt.Errorf("tamper: lease %s: %w", p.Name, err)
			}
		}
		made = append(made, p)
	}
	return made, nil
}

// RemovePhantoms deletes the phantoms: with the Writer's lease ID while it
// holds the lease, without one once the lease is no longer held (an
// instance may have broken it). It tries until deadline, every poll.
func (w *Writer) RemovePhantoms(ctx context.Context, ps []Phantom, deadline time.Time, poll time.Duration) error {
	var errs []error
	for _, p := range ps {
		bc := w.cc.NewBlobClient(p.Name)
		var last error
		for try := 0; ; try++ {
			if try > 0 && (time.Now().Add(poll).After(deadline) || !sleep(ctx, poll)) {
				errs = append(errs, fmt.Errorf("tamper: delete %s: %w", p.Name, errors.Join(ErrLeased, last)))
				break
			}
			var opts *blob.DeleteOptions
			if p.LeaseID != "" && try%2 == 0 {
				opts = &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &p.LeaseID}}}
			}
			callCtx, cancel := w.call(ctx)
			_, err := bc.Delete(callCtx, opts)
			cancel()
			if err == nil || bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
				break
			}
			last = err
		}
	}
	return errors.Join(errs...)
}

// sleep waits d, or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
