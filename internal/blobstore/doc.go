// Package blobstore is the library's storage boundary: the only code that
// calls the Azure SDK's container, blob and lease clients. Everything above
// it (the term engine, the mutex, sessions and shards) sees storage through
// a [Client] for one container and a [Blob] handle per blob, and gets back
// plain values ([Props], [Lease], [Page]) and one error type ([*Error]).
//
// It exists so that the rules that keep a lease holder safe are enforced
// in one place rather than at thirty call sites:
//
//   - Every request is bounded by a timeout (the configured RequestTimeout,
//     or the call's own: see [Call]) and sent with the SDK's retries turned
//     off. The SDK's defaults (three retries from 0.8 s, no per-try
//     timeout) can hold a renewal for 10 s or, against a server that
//     accepts and never answers, forever; the callers retry on their own
//     schedule, which knows how long the lease has left.
//   - Every failure is an [*Error] that says what the root's StorageError
//     prints: the operation, the blob, the HTTP status and the Azure error
//     code, or, when no answer came, a description with every secret
//     (account key, SAS token) removed, and whether the request never left
//     this host. Its [Kind] sorts it into held, lost, transient or permanent
//     by per-call lists of Azure error codes, as the lease's user reads
//     them (the same 409 means "someone else leads" to an acquire and
//     "you lost it" to nobody).
//   - An acquire or a renewal that the server answers with another lease ID
//     than the one proposed is not a success: Azurite lets a non-holder
//     renew an expired lease and revives the old holder's ID.
//   - Listings report, per page, when the page arrived, and give ETags
//     quoted as headers give them, so that an ETag read from a listing can
//     be compared with, and sent back as, one read from a blob.
//
// The package builds its clients itself from a [Config] (a connection
// string, a service URL and a token credential, a SAS URL, or a caller's
// client), with an HTTP transport of its own whose idle connections
// [Client.CloseIdleConnections] closes, so that no goroutine outlives the
// library's use of storage.
//
// It imports nothing of the library's root package. Its configuration
// errors ([*ConfigError]) and the texts of its errors are the root's, word
// for word, so that the root can pass them on as they are, or wrap them into
// its public types without losing anything.
package blobstore
