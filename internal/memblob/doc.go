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
// It refuses what storage refuses from a client signing with the account's
// key, whatever client sent it: a header net/http would not send (a
// newline in a metadata value, a metadata name with a space or a non-ASCII
// letter) fails in Do with net/http's error, as the transport returns it
// before sending; an x-ms-* header the server would not read as signed (a
// value with spaces or tabs at either end, or bytes above 0x7f; a metadata
// name sent twice in two cases) is 403 AuthorizationFailure.
//
// Where Azurite departs from documented Azure behaviour, the fake follows
// Azurite (the contract tests compare the two) and says so in a comment
// marked "Azurite divergence". A test that passes here may therefore fail
// on Azure where it relies on one of these:
//
//   - another client's renew of an expired lease succeeds, reviving the
//     original lease (its ID is in the answer); Azure: 409;
//   - a write presenting an expired or broken lease's ID gets 412
//     LeaseNotPresentWithBlobOperation; Azure: 412 LeaseLost;
//   - If-None-Match: * on an existing blob passes for Set Blob Metadata,
//     Delete Blob and the lease actions; Azure documents that it fails the
//     operation (412), though Azurite's source notes one Azure operation
//     that lets it pass;
//   - a proposed lease ID need not be a GUID; Azure: 400;
//   - an infinite lease takes any break period; Azure: 400 outside 0..60;
//   - a deleted container's name can be used again at once; Azure: 409
//     ContainerBeingDeleted for about 30 s;
//   - List Blobs' NextMarker is the last name listed; Azure's is opaque;
//   - a request whose signature does not match is 403
//     AuthorizationFailure; Azure: 403 AuthenticationFailed (and a
//     metadata name sent twice is documented as 400 there).
//
// The one deliberate difference from Azurite: maxresults below 1 answers
// Azure's 400 OutOfRangeQueryParameterValue where Azurite sends a bare 400.
//
// WithObserver sees every request the service applied or refused, under the
// service's lock, in the order they took effect: a safety checker can follow
// every lease's holders from it. The admin methods (Blob, SetBlobMetadata,
// DeleteBlob, DeleteContainer) bypass HTTP and lease checks, for setting up
// tests and injecting faults.
package memblob
