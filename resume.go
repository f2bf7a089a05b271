package leaderelection

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// WithLeaseIDFile lets a leader that crashed and was restarted (by systemd,
// or a container runtime restarting the container in place) take its lease
// straight back, rather than waiting for it to expire (about 13.5 s with the
// defaults). The lease ID is kept in the file at path, which the running
// process holds under an exclusive flock(2) while it may use the ID:
// [BlobDistributedMutex.RunTaskWhenMutexAcquired] takes the lock when it
// starts and releases it when it returns, and the kernel releases it when the
// process dies. A process that gets the lock therefore knows that every
// earlier holder has exited, and acquires with their ID at once; the server
// grants the same ID's acquire while the lease stands. The ID proposed is
// derived from the file's and the duration the lease asks for (a native
// lease's seconds, or infinite), so a process started again asking for
// another (a rollout that changes LeaseDuration across the native range, or
// from one native duration to another), or across an upgrade of the library from a
// version before this derivation, proposes another ID, and waits once, as
// any other instance does: an acquire its predecessor left in flight must
// never set a duration on its lease (see fileLeaseID). It then records a new
// term (number + 1) before its leader func starts, as on any other win. The
// reasoning is at the top of renew.go. The lock proves the process dead, not
// work it handed to others (child processes, remote jobs): as after any
// failover, the term is what fences those.
//
// A second live process pointed at the same file is refused at once: its
// RunTaskWhenMutexAcquired returns an error matching [ErrLeaseIDFileLocked]
// without contending. So the file must be one per instance, never shared by
// replicas (a rolling update that starts the new process before the old one
// exits is refused until the old one has gone).
//
// Sound only on a local filesystem of one host: a host directory, or a
// volume that outlives a container's restart on that host. Not on a network
// filesystem: NFS and SMB locks are advisory and may be lost across a server
// or client failure, and two hosts must never share the file, nor a copy of
// it (restoring or copying it elsewhere would let two live processes propose
// one lease ID). Do not delete or replace the file while a process may hold
// it: a new file is a new lock. A Kubernetes pod that is replaced, rather
// than its container restarted, gets a fresh emptyDir and so a fresh ID.
//
// The file holds one GUID and a newline, and is created (mode 0600) if
// missing; an empty file gets a fresh ID; any other content is an error, and
// the file is left as it is. Before any release is sent, the file moves on to
// a fresh ID, durably, so a release still in flight when the process died can
// never end the lease of its successor. The lease ID lets its holder release
// the lease: keep the file readable by the service only.
//
// For a mutex over a quorum of accounts ([NewQuorumMutex]) the one file
// names the lease ID proposed on every account, and moves on for all of
// them before a release is sent on any; a process restarted with it tries
// every account, and takes back those its predecessor held (quorum.go's Q4).
//
// For a [ShardOwner] the file holds its session's ID (a session's lease ID),
// and makes it a static member, as Kafka's group.instance.id does: when the
// caller ends Run, nothing is handed on or released (every shard func is
// asked to stop, and Run returns once all have returned), and a process
// started again with the file within LeaseDuration resumes the session and
// takes back every shard it held, each under the next term, before it claims
// anything else: no shard moves. One that does not come back is taken for
// dead, as after a crash: the other instances take its shards once its
// session has stood silent for LeaseDuration. So an instance leaving for
// good (a scale-down) should run without the file, or its shards wait that
// long. See sessionfile.go.
//
// flock(2) is needed: on other platforms (Windows) the option is refused at
// construction. With [NewBlobLeaseManager], the file is used only between
// [BlobLeaseManager.LockLeaseIDFile] and the call of the function it returns.
func WithLeaseIDFile(path string) Option {
	return func(o *options) {
		o.leaseIDFile = path
		o.leaseIDFileSet = true
	}
}

// ErrLeaseIDFileLocked is returned by
// [BlobDistributedMutex.RunTaskWhenMutexAcquired], [ShardOwner.Run] and
// [BlobLeaseManager.LockLeaseIDFile] when another live process, or another
// mutex, owner or manager in this one, holds the lease ID file (see
// [WithLeaseIDFile]). Two holders of one lease ID would both believe they
// lead, so the second is refused rather than made to wait.
var ErrLeaseIDFileLocked = errors.New("leaderelection: the lease ID file is locked by another live holder")

// leaseIDFile is the state of the manager's lease ID file (see
// WithLeaseIDFile).
type leaseIDFile struct {
	path string // "" when not configured
	// also are the managers that propose the file's ID with this one, and
	// move off it with it: a quorum's other accounts (quorum.go's Q4).
	also []*BlobLeaseManager

	mu sync.Mutex // serialises locking, unlocking and moving on to a new ID
	f  *os.File   // open and flocked while held, nil otherwise
}

// checkLeaseIDFile validates the option at construction.
func checkLeaseIDFile(path string, set bool) error {
	switch {
	case !set:
		return nil
	case path == "":
		return errors.New("leaderelection: WithLeaseIDFile: the path is empty")
	case !flockSupported:
		return errors.New("leaderelection: WithLeaseIDFile needs flock(2), which this platform does not have")
	}
	return nil
}

// LockLeaseIDFile takes the lease ID file given with [WithLeaseIDFile] and
// makes the manager propose its lease ID (a fresh one, stored durably first,
// if the file is new or empty). It fails at once, with an error matching
// [ErrLeaseIDFileLocked], if another holder has the file. Call unlock when
// done with the lease: from then on the manager proposes a fresh ID that is
// not in the file, since another process may take the file, and its ID, the
// moment the lock is gone. Without WithLeaseIDFile it does nothing.
//
// [BlobDistributedMutex.RunTaskWhenMutexAcquired] calls it for its whole run;
// call it yourself only when driving a [BlobLeaseManager] directly.
func (m *BlobLeaseManager) LockLeaseIDFile() (unlock func(), err error) {
	fl := &m.idFile
	if fl.path == "" {
		return func() {}, nil
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.f != nil {
		return nil, fmt.Errorf("%w: %s is already held by this manager", ErrLeaseIDFileLocked, fl.path)
	}
	f, err := lockFile(fl.path)
	if err != nil {
		return nil, err
	}
	id, err := readLeaseID(f, fl.path)
	if err == nil && id == "" {
		// Stored before it is ever sent: a crash after the first acquire
		// must find this ID in the file.
		id = uuid.NewString()
		err = writeLeaseID(f, fl.path, id)
		if err == nil {
			err = syncDir(filepath.Dir(fl.path))
		}
	}
	if err != nil {
		_ = f.Close() // drops the lock
		return nil, err
	}
	m.proposeWithFile(id)
	fl.f = f
	return sync.OnceFunc(func() {
		fl.mu.Lock()
		defer fl.mu.Unlock()
		// Move off the file's ID before the lock goes, so there is no moment
		// when another process may hold it and this manager still proposes it.
		m.proposeWithFile(uuid.NewString())
		_ = fl.f.Close()
		fl.f = nil
	}), nil
}

// retireLeaseID returns the lease ID handle a release must use. With the
// lease ID file held, it first moves the file, and the manager (and those
// that share its file), on to a fresh ID, durably: the file then never holds
// an ID whose release has been sent, so a process that resumes from it
// cannot have its lease ended by a release that its dead predecessor sent
// and that reaches the server late. If the file cannot be written, nothing
// may be sent: the lease expires by itself.
func (m *BlobLeaseManager) retireLeaseID() (*leaseHandle, error) {
	fl := &m.idFile
	fl.mu.Lock()
	defer fl.mu.Unlock()
	h := m.id.Load()
	if fl.f == nil {
		return h, nil
	}
	next := uuid.NewString()
	if err := writeLeaseID(fl.f, fl.path, next); err != nil {
		return nil, fmt.Errorf("leaderelection: release lease not sent, it will expire by itself: %w", err)
	}
	m.proposeWithFile(next)
	return h, nil
}

// proposeWithFile makes the manager, and those that share its file
// (idFile.also), propose the lease ID of id, the file's (fileLeaseID).
func (m *BlobLeaseManager) proposeWithFile(id string) {
	m.proposeLeaseID(m.fileLeaseID(id))
	for _, o := range m.idFile.also {
		o.proposeLeaseID(o.fileLeaseID(id))
	}
}

// fileLeaseID is the lease ID this manager proposes for id, the lease ID
// file's: a GUID derived from id and the duration its acquires ask for (a
// name-based UUID, version 5, in id's namespace): a native lease's seconds,
// or infinite (an ETag lease's). So every acquire ever sent under one lease
// ID asks for the same duration. An acquire under the holder's own ID
// succeeds, and sets the lease's duration to the one it asks for; a process
// that died with an acquire in flight, and was started again in place on
// another duration (a rollout that changes LeaseDuration), would otherwise
// have that acquire, applied late, turn its successor's lease into one of
// the old duration: an ETag lease (infinite, renewed by writes) into a fixed
// one that expires under its holder, who renews no native lease; a native
// one into a shorter one, that expires between its renewals, or into an
// infinite one, which followers break as a silent ETag lease while its
// holder renews it natively. Either lets a follower take the lease while
// its holder still leads. With its own ID per duration asked, such an
// acquire finds the lease held under another ID, or, if it is free, takes
// it as any dead holder's would be taken (it expires, or its ETag stands).
// An ETag lease of another LeaseDuration asks for the same infinite lease:
// it keeps the ID, safely, as its renewals and term records are written
// If-Match the ETag its own last write left. The file's ID itself is never
// proposed: versions before this derivation proposed it for every lease,
// so a process restarted in place across an upgrade or a downgrade proposes
// another ID than its predecessor, whatever its lease, and waits once, as
// any other instance does. (A simulator found it: seed 473433247278, an ETag
// mutex's leader whose native 15 s lease expired under it, renewed by
// writes only, after a rollout from 15 s to 1m3.82s.) A ShardOwner's session
// is named by the file's ID itself (sessionfile.go): its lease is always
// infinite, in every version.
func (m *BlobLeaseManager) fileLeaseID(id string) string { return fileLeaseID(id, m.leaseSeconds()) }

// fileLeaseID is the lease ID proposed for id, the lease ID file's, by a
// manager that asks for leases of secs seconds (-1: infinite).
func fileLeaseID(id string, secs int32) string {
	base, err := uuid.Parse(id)
	if err != nil {
		// Not the file's, which readLeaseID checked: nothing to derive.
		return id
	}
	asked := "an infinite lease"
	if secs >= 0 {
		asked = fmt.Sprintf("a native lease of %d s", secs)
	}
	return uuid.NewSHA1(base, []byte(asked)).String()
}

// maxLeaseIDFile is the most a valid lease ID file holds: a GUID (36) and a
// newline, with room for a carriage return or stray spaces.
const maxLeaseIDFile = 64

// readLeaseID returns the ID stored in f, "" if it is empty.
func readLeaseID(f *os.File, path string) (string, error) {
	buf := make([]byte, maxLeaseIDFile+1)
	n, err := f.ReadAt(buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("leaderelection: reading lease ID file %s (WithLeaseIDFile): %w", path, err)
	}
	text := strings.TrimSpace(string(buf[:n]))
	if text == "" {
		return "", nil
	}
	if _, perr := uuid.Parse(text); perr != nil || len(text) != 36 || n > maxLeaseIDFile {
		shown := text
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		return "", fmt.Errorf("leaderelection: lease ID file %s (WithLeaseIDFile) holds %q, not a lease ID (one GUID); "+
			"with no process running, remove it to start with a fresh ID", path, shown)
	}
	return text, nil
}

// writeLeaseID replaces f's content with id, durably. It writes in place
// rather than renaming a new file over it: the lock belongs to this inode,
// and a renamed-in file would be a new, unlocked one. IDs all have the same
// length, so an interrupted write leaves either ID, whole, on a local disk.
func writeLeaseID(f *os.File, path, id string) error {
	data := []byte(id + "\n")
	if _, err := f.WriteAt(data, 0); err != nil {
		return fmt.Errorf("leaderelection: writing lease ID file %s (WithLeaseIDFile): %w", path, err)
	}
	if err := f.Truncate(int64(len(data))); err != nil {
		return fmt.Errorf("leaderelection: writing lease ID file %s (WithLeaseIDFile): %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("leaderelection: syncing lease ID file %s (WithLeaseIDFile): %w", path, err)
	}
	return nil
}

// syncDir makes a newly created file's directory entry durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("leaderelection: syncing the directory of the lease ID file (WithLeaseIDFile): %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("leaderelection: syncing the directory of the lease ID file (WithLeaseIDFile): %w", err)
	}
	return nil
}
