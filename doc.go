// Package leaderelection elects one leader among many identical instances of
// a service, using a lease on one Azure Storage blob, and runs the caller's
// leader func only while it is safe to: Microsoft's Leader Election cloud
// pattern, done in Go.
//
//	settings := leaderelection.BlobSettings{
//		ConnectionString: os.Getenv("AZURE_STORAGE_CONNECTION_STRING"),
//		Container:        "leases",
//		Blob:             "MyLeaderCoordinatorTask",
//	}
//	mutex, err := leaderelection.NewBlobDistributedMutex(settings, coordinate)
//	if err != nil {
//		return err // names the invalid field
//	}
//	err = mutex.RunTaskWhenMutexAcquired(ctx) // until ctx is done or storage refuses us
//
// A service with many singleton jobs (one per tenant, partition or queue)
// runs them through one [ShardOwner]: each instance holds a session (an
// ETag lease of its own), each job is a shard tied to a session, and the
// shards spread evenly over the live instances, at a cost per instance, not
// per shard.
//
// # What is guaranteed
//
// The leader func's context is cancelled before the lease can expire on the
// server: at the send time of the last successful renewal, plus the lease
// duration, minus StopMargin, measured on the monotonic clock, whether or not
// a renewal is still in flight. The server cannot let another instance take
// the lease earlier than that send time plus the lease duration (unless an
// operator breaks it with a period shorter than SafeBreakPeriod). So as long
// as the func returns within StopMargin of its context being cancelled, no
// two leader funcs act at once. A func that winds down after the caller
// cancelled (the lease is renewed until it returns) must instead stop acting
// within StopMargin of [LeaseContext] being done, which happens only when the
// lease may pass to another instance. The lease is released only after the
// func has returned, and the func is never started again while it still runs.
//
// A LeaseDuration of 15 to 60 s takes Azure's own lease, which the server
// expires. Any other, from 3 s to 24 h, takes an [ETagLease]: an infinite
// lease that the holder renews by rewriting the blob's metadata, and that a
// follower breaks once the blob's ETag has stood unchanged for the lease
// duration the holder declared, on condition that it is still unchanged.
// The same deadline, from the send time of the holder's last confirmed
// write, keeps the two leaders apart.
//
// Transient storage failures (5xx, 408, 429, timeouts, connection errors)
// are retried, and do not end a term before its safety deadline. Permanent
// ones (bad credentials, missing permissions) make RunTaskWhenMutexAcquired
// return an error that names the Azure error code. Account keys and SAS tokens
// never appear in errors or logs.
//
// # What is not
//
// A leader func that ignores its context keeps running; it is logged at Error
// level. A process frozen across its deadline (SIGSTOP, a paused VM, a very
// long stop-the-world pause) cannot act on its cancellation until it thaws.
// Neither can be prevented from inside the process: downstream systems that
// must never accept a stale leader's writes should check the term number
// (see [TermFromContext]), a fencing token that only grows. The
// storage account is a single point of failure: while it is unreachable
// nobody can become leader, and a leader that cannot renew stops at its
// deadline. The blob is reserved for the lease.
package leaderelection
