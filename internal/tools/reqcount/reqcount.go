// Package reqcount counts the HTTP requests an Azure SDK client sends, for
// the benchmarks: their request rates are counted, not computed.
package reqcount

import (
	"net/http"
	"sync/atomic"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// Policy is a pipeline policy that counts every request it passes on. As
// one of azcore.ClientOptions.PerRetryPolicies it counts retries too.
type Policy struct{ n atomic.Int64 }

// Do counts req and sends it on.
func (p *Policy) Do(req *policy.Request) (*http.Response, error) {
	p.n.Add(1)
	return req.Next()
}

// Count is how many requests have been sent so far.
func (p *Policy) Count() int64 { return p.n.Load() }
