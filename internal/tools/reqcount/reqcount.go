// Package reqcount counts the HTTP requests an Azure SDK client sends, for
// the benchmarks: their request rates are counted, not computed.
package reqcount

import (
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Policy is a pipeline policy that counts every request it passes on, by
// class. As one of azcore.ClientOptions.PerRetryPolicies it counts retries
// too. Its zero value is ready to use.
type Policy struct {
	lease, write, read atomic.Int64
}

// Counts is how many requests of each class were sent. Lease operations
// (comp=lease: acquire, renew, release, break, change) are counted apart
// from the other writes (PUT, DELETE, POST: metadata writes, which renew an
// ETag lease, and creating the container or blob) and from reads (GET,
// HEAD: a follower's look at the lease).
type Counts struct {
	Lease, Write, Read int64
}

// Total is every request counted.
func (c Counts) Total() int64 { return c.Lease + c.Write + c.Read }

// Do counts req and sends it on.
func (p *Policy) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	switch {
	case raw.URL.Query().Get("comp") == "lease":
		p.lease.Add(1)
	case raw.Method == http.MethodGet || raw.Method == http.MethodHead:
		p.read.Add(1)
	default:
		p.write.Add(1)
	}
	return req.Next()
}

// Counts is how many requests of each class have been sent so far.
func (p *Policy) Counts() Counts {
	return Counts{Lease: p.lease.Load(), Write: p.write.Load(), Read: p.read.Load()}
}

// Count is how many requests have been sent so far, of every class.
func (p *Policy) Count() int64 { return p.Counts().Total() }
