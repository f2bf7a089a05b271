// Package memblob is an in-memory Azure Blob Storage service for tests.
//
// A Service implements azcore's policy.Transporter: real SDK clients
// (container.Client, blob.Client, blockblob.Client, lease.BlobClient) built
// with azcore.ClientOptions{Transport: svc} send their HTTP requests to it
// in-process, and it answers them as Azurite 3.37 does, from memory, with no
// network. The library under test therefore runs its real code, through the
// real SDK, against a fake whose lease semantics are pinned by contract tests
// that run the same cases against Azurite.
//
//	svc := memblob.New()
//	opts := &container.ClientOptions{ClientOptions: svc.ClientOptions()}
//	cc, err := container.NewClientFromConnectionString(memblob.ConnectionString, "c", opts)
//
// The service keeps time on the clock it is given (WithClock, time.Now by
// default): lease expiry and break periods are computed lazily from it at
// each request, and nothing runs in the background. Inside a testing/synctest
// bubble time.Now is virtual, so a 15 s lease expires after 15 s of virtual
// time, in microseconds of wall time.
//
// What it serves: containers (create, delete, get properties, list blobs
// flat with prefix, marker, maxresults and include=metadata), block blobs
// (upload, get properties, download, set metadata, delete) and blob leases
// (acquire, renew, release, break, change), with If-Match, If-None-Match,
// If-Modified-Since and If-Unmodified-Since conditions and lease
// conditions. Anything else answers 501 NotImplemented, so that a test that
// strays outside the fake's contract fails loudly instead of passing on a
// guess.
//
// Where Azurite departs from documented Azure behaviour, the fake follows
// Azurite (the contract tests compare the two) and says so in a comment
// marked "Azurite divergence".
//
// WithObserver sees every request the service applied or refused, under the
// service's lock, in the order they took effect: a safety checker can follow
// every lease's holders from it. The admin methods (Blob, SetBlobMetadata,
// DeleteBlob, DeleteContainer) bypass HTTP and lease checks, for setting up
// tests and injecting faults.
package memblob
