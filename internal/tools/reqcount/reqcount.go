// Package reqcount counts the HTTP requests an Azure SDK client sends, for
// the benchmarks: their request rates are counted, not computed.
package reqcount

import (
	"fmt"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

// Profile is a pipeline policy that times every request it passes on, by
// operation: the method, the comp and lease action, and the first folder of
// the blob's name under the container (shards, sessions, notes...). It
// tells where a benchmark's requests, and their waits, go. Its zero value
// is ready to use.
type Profile struct {
	Slow  func(string) // if set, told of each request that took over a second
	mu    sync.Mutex
	stats map[string]*Stat
}

// Stat is what a Profile saw of one operation since it was last taken.
type Stat struct {
	Count      int64
	Total, Max time.Duration
}

// Do times req and sends it on.
func (p *Profile) Do(req *policy.Request) (*http.Response, error) {
	raw := req.Raw()
	op := raw.Method
	q := raw.URL.Query()
	if c := q.Get("comp"); c != "" {
		op += " " + c
	}
	if a := raw.Header.Get("x-ms-lease-action"); a != "" {
		op += " " + a
	}
	// /account/container/dir/... or a listing's prefix
	parts := strings.SplitN(strings.TrimPrefix(raw.URL.Path, "/"), "/", 4)
	if len(parts) >= 3 {
		op += " " + parts[2]
		if len(parts) == 4 {
			if i := strings.Index(parts[3], "/"); i > 0 {
				op += "/" + parts[3][:i]
			}
		}
	} else if pre := q.Get("prefix"); pre != "" {
		// A listing: its prefix, less a last part that names one blob.
		if i := strings.Index(pre, "/"); i > 0 {
			if j := strings.Index(pre[i+1:], "/"); j > 0 {
				pre = pre[:i+1+j]
			}
		}
		op += " " + pre
	}
	start := time.Now()
	var conn httptrace.GotConnInfo
	var gotConn, wrote time.Time
	trace := &httptrace.ClientTrace{
		GotConn:      func(i httptrace.GotConnInfo) { conn, gotConn = i, time.Now() },
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote = time.Now() },
	}
	resp, err := req.WithContext(httptrace.WithClientTrace(req.Raw().Context(), trace)).Next()
	d := time.Since(start)
	if d > time.Second && p.Slow != nil {
		sub := func(t time.Time) time.Duration {
			if t.IsZero() {
				return -1
			}
			return t.Sub(start)
		}
		p.Slow(fmt.Sprintf("op=%q start=%s took=%s gotConn=%s wrote=%s reused=%v wasIdle=%v idle=%s local=%v err=%v",
			op, start.UTC().Format("15:04:05.000"), d, sub(gotConn), sub(wrote), conn.Reused, conn.WasIdle, conn.IdleTime, localOf(conn), err))
	}
	p.mu.Lock()
	if p.stats == nil {
		p.stats = map[string]*Stat{}
	}
	s := p.stats[op]
	if s == nil {
		s = &Stat{}
		p.stats[op] = s
	}
	s.Count++
	s.Total += d
	s.Max = max(s.Max, d)
	p.mu.Unlock()
	return resp, err
}

// Take returns what was seen since the last Take, and starts afresh.
func (p *Profile) Take() map[string]Stat {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Stat, len(p.stats))
	for k, s := range p.stats {
		out[k] = *s
	}
	clear(p.stats)
	return out
}

func localOf(i httptrace.GotConnInfo) string {
	if i.Conn == nil {
		return ""
	}
	return i.Conn.LocalAddr().String()
}
