package faults

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"time"
)

// Rates makes a share of the requests misbehave, each request drawn on its
// own, on top of the mode: they apply to requests that the mode would
// forward (pass-through, or after a Delay), and a Blackhole, Fail or
// ResetConnections wins over them. A simulator sets them for a while, then
// clears them with the zero Rates.
type Rates struct {
	// Fail is the share of requests answered, without being sent, with
	// the synthetic error response of FailStatus and FailCode (as Fail
	// gives): 503 ServerBusy or 429 TooManyRequests for a throttled
	// account, 500 InternalError for a failing one.
	Fail       float64
	FailStatus int
	FailCode   string
	// Lose is the share of requests sent, and applied by the server, whose
	// answer is replaced by a connection reset: the caller never learns
	// that its request took effect.
	Lose float64
	// Late is the share of requests held in the network: the caller gets
	// no answer until its context ends (as in a partition), and the
	// request reaches the server from LateMin to LateMax after it was
	// sent, whatever happened meanwhile: after the caller gave up, after
	// requests it sent later, after a Blackhole, even after the caller's
	// process is gone. Only Close drops the requests still held.
	Late             float64
	LateMin, LateMax time.Duration
	// Die is the share of requests that change storage (any but a GET or
	// a HEAD), lease renewals aside (x-ms-lease-action renew: an ETag
	// lease's renewal, a write of its record, may be drawn), that are
	// their process's last: the Transport goes silent as Blackhole makes
	// it (the answers of requests in flight withheld too), then sends the
	// request, which the server applies, and its caller never learns so.
	// A crash then lands inside a step of several requests, not between
	// steps. Dying, if not nil, is asked first, outside the lock, with the
	// request: false lets it through as it came (a fault model holding the
	// crash back, or waiting for a request of another kind).
	Die   float64
	Dying func(*http.Request) bool
	// For, if not nil, gives each request's own Fail (with its
	// FailStatus and FailCode), Lose and Late (with LateMin and LateMax),
	// in place of these: faults narrowed to a kind of request (OpOf), as
	// a lane whose listings fail while its other requests go through, on
	// an account whose List Blobs is throttled, or behind a proxy that
	// times out on long answers. Called under the Transport's lock: it
	// must not call the Transport. Die is not narrowed.
	For func(*http.Request) Rates
}

// The kinds of request OpOf tells apart.
const (
	OpList  = "listings"      // List Blobs (a GET with comp=list)
	OpLease = "lease actions" // acquire, renew, change, release, break
	OpRead  = "reads"         // any other GET or HEAD
	OpWrite = "writes"        // any other request: a put, a metadata write, a delete
)

// Ops are the kinds of request OpOf tells apart.
var Ops = []string{OpList, OpLease, OpRead, OpWrite}

// OpOf is the kind of request req is (OpList, OpLease, OpRead or OpWrite).
func OpOf(req *http.Request) string {
	switch {
	case leaseAction(req.Header) != "":
		return OpLease
	case req.Method == http.MethodGet && req.URL.Query().Get("comp") == "list":
		return OpList
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		return OpRead
	}
	return OpWrite
}

// The kinds of fault Exchange.Fault names; "" is a request forwarded as it
// came.
const (
	FaultBlackhole = "blackhole" // held by Blackhole
	FaultFail      = "fail"      // answered by Fail, FailNext or Rates.Fail, not sent
	FaultReset     = "reset"     // reset by ResetConnections, not sent
	FaultDelay     = "delay"     // sent after Delay's latency
	FaultLose      = "lose"      // sent, applied, its answer lost (LoseNextAnswer, Rates.Lose)
	FaultLate      = "late"      // held, and sent later (Rates.Late)
	FaultClosed    = "closed"    // refused after Close
	FaultDie       = "die"       // sent, applied, its answer lost, and the Transport silent from then on (Rates.Die)
)

// SetRates sets the rates of misbehaving requests for requests that start
// afterwards, drawing from rng (which the Transport then uses under its own
// lock, and the caller must not use any more). The zero Rates, or a nil
// rng, turns them off.
func (t *Transport) SetRates(r Rates, rng *rand.Rand) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if rng == nil {
		r = Rates{}
	}
	t.rates, t.rng = r, rng
}

// drawn is what Rates do to one request (drawRate): a fault kind ("" for
// none); for a late one, its delay; for a failed one, its status and code;
// for a death, Rates.Dying as it stands, to be asked outside the lock.
type drawn struct {
	kind   string
	late   time.Duration
	status int
	code   string
	dying  func(*http.Request) bool
}

// drawRate decides, under the lock, what Rates do to one request (req).
func (t *Transport) drawRate(req *http.Request) drawn {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.rates
	if t.rng == nil || r.For == nil && r.Fail+r.Lose+r.Late+r.Die == 0 {
		return drawn{}
	}
	if r.Die > 0 && req.Method != http.MethodGet && req.Method != http.MethodHead && leaseAction(req.Header) != "renew" &&
		t.rng.Float64() < r.Die {
		return drawn{kind: FaultDie, dying: r.Dying}
	}
	if r.For != nil {
		own := r.For(req)
		r.Fail, r.FailStatus, r.FailCode, r.Lose, r.Late, r.LateMin, r.LateMax = own.Fail, own.FailStatus, own.FailCode, own.Lose, own.Late, own.LateMin, own.LateMax
	}
	x := t.rng.Float64() // drawn whatever the rates, as before For: a seed's draws stay its own
	switch {
	case x < r.Fail:
		return drawn{kind: FaultFail, status: r.FailStatus, code: r.FailCode}
	case x < r.Fail+r.Lose:
		return drawn{kind: FaultLose}
	case x < r.Fail+r.Lose+r.Late:
		d := r.LateMin
		if r.LateMax > r.LateMin {
			d += time.Duration(t.rng.Int64N(int64(r.LateMax - r.LateMin)))
		}
		return drawn{kind: FaultLate, late: d}
	}
	return drawn{}
}

// sendLate sends req's copy d from now, detached from the caller: its body
// is read now, its context is one the caller cannot end. It returns at
// once; only Close stops the copy on its way.
func (t *Transport) sendLate(req *http.Request, d time.Duration) error {
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		closeBody(req)
		if err != nil {
			return urlError(req, err)
		}
		body = b
	}
	late := req.Clone(context.WithoutCancel(req.Context()))
	late.Body = io.NopCloser(bytes.NewReader(body))
	late.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	t.lateWG.Add(1)
	go func() {
		defer t.lateWG.Done()
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-t.closed:
			return
		case <-timer.C:
		}
		if resp, err := t.forward(late); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	return nil
}

// WaitLate waits until every request held by Rates.Late has been sent, or
// dropped by Close.
func (t *Transport) WaitLate() { t.lateWG.Wait() }
