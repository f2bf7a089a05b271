// Package faults provides an HTTP transport for Azure SDK clients that can
// be told, at any moment and while requests are running, to misbehave the
// way storage and networks do: never answer, answer with an error code, be
// slow, or reset connections. Tests use it to check that a leader steps down
// in time and recovers when storage comes back.
//
// Plug it into a client through azcore.ClientOptions.Transport:
//
//	ft := faults.New()
//	defer ft.Close()
//	client, err := azblob.NewClientFromConnectionString(conn, &azblob.ClientOptions{
//		ClientOptions: azcore.ClientOptions{Transport: ft},
//	})
//	...
//	ft.Blackhole() // storage goes silent
//	...
//	ft.Heal()
package faults

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
)

// mode is what Transport does with a request.
type mode int

const (
	passThrough mode = iota
	blackhole
	fail
	delay
	reset
)

// Exchange describes one request that went through a Transport, for
// Observe.
type Exchange struct {
	// Method is the request's HTTP method.
	Method string
	// URL is the request URL, to tell apart blobs that share a Transport.
	URL string
	// LeaseAction is the request's x-ms-lease-action header (acquire,
	// renew, release, break or change), or "" for other requests.
	LeaseAction string
	// Sent is when the request was handed to the real transport (after any
	// Delay), or when Do was called if the request was not forwarded. It
	// comes from time.Now, so it has a monotonic reading.
	Sent time.Time
	// Done is when Do returned.
	Done time.Time
	// Status is the response's status code, or 0 if Do returned an error.
	Status int
	// Err is the error Do returned, or nil.
	Err error
	// Fault is the fault injected into the exchange (FaultBlackhole,
	// FaultFail, ...), or "" for a request forwarded as it came.
	Fault string
}

// Transport is an azcore policy.Transporter (it has the method
// Do(*http.Request) (*http.Response, error)) that forwards requests to a real
// HTTP transport, or injects a fault instead. The mode can be switched at
// any time, concurrently with requests; a switch applies to requests that
// start afterwards, and Blackhole also to requests already in flight.
//
// The zero value is not usable; call New.
type Transport struct {
	tr     *http.Transport // ours alone, so Close can drop its connections; nil over another transporter
	client *http.Client
	inner  policy.Transporter // what requests go to, if not client (see Over)

	mu         sync.Mutex
	mode       mode
	status     int
	code       string
	delay      time.Duration
	blackholes uint64 // Blackhole calls so far; see heldBack
	observe    func(Exchange)
	once       map[string]onceFault // by lease action: see FailNext, LoseNextAnswer
	rates      Rates                // see SetRates
	rng        *mrand.Rand          // draws for rates; nil: none
	lateWG     sync.WaitGroup       // requests held by Rates.Late, on their way

	closeOnce sync.Once
	closed    chan struct{} // closed by Close
}

// New returns a pass-through Transport with a connection pool of its own
// (a clone of http.DefaultTransport's settings).
func New() *Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	return &Transport{
		tr:     tr,
		client: &http.Client{Transport: tr},
		closed: make(chan struct{}),
	}
}

// Over returns a pass-through Transport in front of inner (an in-memory
// Blob service, say) instead of a real HTTP transport.
func Over(inner policy.Transporter) *Transport {
	return &Transport{inner: inner, closed: make(chan struct{})}
}

// Inner is the transporter Over put this Transport in front of, or nil.
func (t *Transport) Inner() policy.Transporter { return t.inner }

// Blackhole makes storage silent, like a partitioned network or a server
// that accepts connections and never answers: new requests are not sent,
// and Do returns only when the request's context is done, with its error
// (wrapped in *url.Error, as net/http does). Responses to requests already
// in flight are withheld in the same way, even if they arrive after Heal:
// such a request may have taken effect on the server, but its caller never
// learns so, which is exactly the ambiguity a partition creates. (A response
// that Do has already returned is not affected, even if its body is still
// being read; lease responses have no body.)
//
// With a context that never ends, Do blocks until Close.
func (t *Transport) Blackhole() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mode = blackhole
	t.blackholes++
}

// Fail makes every new request get, without being sent, a synthetic error
// response the way Azure Storage writes them: the given status, an
// x-ms-error-code header with code, and (except for HEAD) an XML body
// <Error><Code>code</Code><Message>…</Message></Error>. azcore turns it into
// a *azcore.ResponseError whose ErrorCode is code, so bloberror.HasCode
// matches it, and azcore's retry policy treats it like the real thing
// (retrying 408, 429 and 5xx unless retries are off).
func (t *Transport) Fail(status int, code string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mode = fail
	t.status = status
	t.code = code
}

// Delay adds d of latency before each new request is forwarded. If the
// request's context ends during the delay, Do returns its error without
// sending the request.
func (t *Transport) Delay(d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mode = delay
	t.delay = d
}

// ResetConnections makes new requests fail at once, without being sent,
// with the error net/http gives when the server resets the connection: a
// *url.Error wrapping a *net.OpError wrapping syscall.ECONNRESET (so
// errors.Is(err, syscall.ECONNRESET) holds). It also closes the pooled idle
// connections, so that after Heal requests go over new connections, as they
// would after a real reset.
func (t *Transport) ResetConnections() {
	t.mu.Lock()
	t.mode = reset
	t.mu.Unlock()
	if t.tr != nil {
		t.tr.CloseIdleConnections()
	}
}

// Heal switches back to pass-through for new requests. Responses of requests
// that were in flight during a Blackhole stay withheld.
func (t *Transport) Heal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mode = passThrough
}

// onceFault is a fault for the next request with a given lease action.
type onceFault struct {
	status int    // the synthetic error's status; 0 means lose the answer
	code   string // its error code
}

// FailNext makes the next request whose lease action (x-ms-lease-action:
// acquire, renew, release, break, change) is action get, without being
// sent, the synthetic error response Fail gives. Other requests, and later
// ones with that action, are not affected.
func (t *Transport) FailNext(action string, status int, code string) {
	t.setOnce(action, onceFault{status: status, code: code})
}

// LoseNextAnswer forwards the next request whose lease action is action,
// and replaces its answer with a connection reset: the request takes effect
// on the server, and its caller never learns so.
func (t *Transport) LoseNextAnswer(action string) {
	t.setOnce(action, onceFault{})
}

func (t *Transport) setOnce(action string, f onceFault) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.once == nil {
		t.once = map[string]onceFault{}
	}
	t.once[action] = f
}

// takeOnce returns, and forgets, the fault armed for the request's lease
// action.
func (t *Transport) takeOnce(action string) (onceFault, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.once[action]
	if ok {
		delete(t.once, action)
	}
	return f, ok
}

// Observe makes the Transport call fn after each request, just before Do
// returns, with a description of the exchange; nil stops it. fn is called
// from the goroutines that call Do, concurrently, so it must be safe for
// that, and it should be quick because it delays the caller.
func (t *Transport) Observe(fn func(Exchange)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.observe = fn
}

// Close ends the Transport: it closes its idle connections, releases
// requests that Blackhole is holding, and makes every later request fail at
// once with a *url.Error wrapping net.ErrClosed. Use it at the end of a test,
// so that neither connection goroutines nor blocked callers remain. It is
// idempotent.
func (t *Transport) Close() {
	t.closeOnce.Do(func() { close(t.closed) })
	if t.tr != nil {
		t.tr.CloseIdleConnections()
	}
}

// Do sends req, or injects the current fault instead. It implements azcore's
// policy.Transporter.
func (t *Transport) Do(req *http.Request) (*http.Response, error) {
	ex := Exchange{
		Method:      req.Method,
		URL:         req.URL.String(),
		LeaseAction: leaseAction(req.Header),
		Sent:        time.Now(),
	}
	var resp *http.Response
	var err error
	switch f, ok := t.takeOnce(ex.LeaseAction); {
	case ok && f.status != 0:
		closeBody(req)
		resp = errorResponse(req, f.status, f.code)
		ex.Fault = FaultFail
	case ok:
		resp, err = t.do(req, &ex)
		ex.Fault = FaultLose
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resp, err = nil, resetError(req)
		}
	default:
		resp, err = t.do(req, &ex)
	}
	ex.Done = time.Now()
	if err != nil {
		ex.Err = err
	} else {
		ex.Status = resp.StatusCode
	}
	t.mu.Lock()
	observe := t.observe
	t.mu.Unlock()
	if observe != nil {
		observe(ex)
	}
	return resp, err
}

func (t *Transport) do(req *http.Request, ex *Exchange) (*http.Response, error) {
	t.mu.Lock()
	m, status, code, d, epoch := t.mode, t.status, t.code, t.delay, t.blackholes
	t.mu.Unlock()

	select {
	case <-t.closed:
		closeBody(req)
		ex.Fault = FaultClosed
		return nil, urlError(req, net.ErrClosed)
	default:
	}
	switch m {
	case blackhole:
		closeBody(req)
		ex.Fault = FaultBlackhole
		return nil, t.hold(req)
	case fail:
		closeBody(req)
		ex.Fault = FaultFail
		return errorResponse(req, status, code), nil
	case reset:
		closeBody(req)
		ex.Fault = FaultReset
		return nil, resetError(req)
	case delay:
		ex.Fault = FaultDelay
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-req.Context().Done():
			closeBody(req)
			return nil, urlError(req, req.Context().Err())
		case <-t.closed:
			closeBody(req)
			return nil, urlError(req, net.ErrClosed)
		case <-timer.C:
		}
		// A partition that began during the delay swallows the request.
		if t.heldBack(epoch) {
			closeBody(req)
			ex.Fault = FaultBlackhole
			return nil, t.hold(req)
		}
		ex.Sent = time.Now()
	}

	switch dr := t.drawRate(req); dr.kind {
	case FaultDie:
		if dr.dying != nil && !dr.dying(req) {
			break
		}
		t.Blackhole()
		ex.Fault = dr.kind
		if resp, err := t.forward(req); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return nil, t.hold(req)
	case FaultFail:
		closeBody(req)
		ex.Fault = dr.kind
		return errorResponse(req, dr.status, dr.code), nil
	case FaultLate:
		ex.Fault = dr.kind
		if err := t.sendLate(req, dr.late); err != nil {
			return nil, err
		}
		return nil, t.hold(req)
	case FaultLose:
		ex.Fault = dr.kind
		resp, err := t.forward(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			err = resetError(req)
		}
		return nil, err
	}

	resp, err := t.forward(req)
	if t.heldBack(epoch) {
		if resp != nil {
			// Nobody will read it: free the connection.
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		ex.Fault = FaultBlackhole
		return nil, t.hold(req)
	}
	return resp, err
}

// forward sends req to the real transport, or the inner one.
func (t *Transport) forward(req *http.Request) (*http.Response, error) {
	if t.inner != nil {
		return t.inner.Do(req)
	}
	return t.client.Do(req)
}

// heldBack reports whether a response to a request that started when
// Blackhole had been called epoch times must be withheld: it must if storage
// is silent now, or went silent at any point while the request was out.
func (t *Transport) heldBack(epoch uint64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mode == blackhole || t.blackholes != epoch
}

// hold blocks like a request to a silent server: until the request's
// context is done (or the Transport is closed), and returns the error
// net/http would return then.
func (t *Transport) hold(req *http.Request) error {
	select {
	case <-req.Context().Done():
		return urlError(req, req.Context().Err())
	case <-t.closed:
		return urlError(req, net.ErrClosed)
	}
}

// leaseAction returns the x-ms-lease-action header.
func leaseAction(h http.Header) string {
	return requestHeader(h, "x-ms-lease-action")
}

// closeBody closes the request body of a request that is not forwarded, as
// the http.RoundTripper contract requires of a transport.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// urlError wraps err the way http.Client.Do wraps transport errors, so code
// under test sees the same error shapes as with a real network.
func urlError(req *http.Request, err error) error {
	op := req.Method
	if op == "" {
		op = http.MethodGet
	}
	// net/http writes "Get", "Put", ….
	op = op[:1] + strings.ToLower(op[1:])
	return &url.Error{Op: op, URL: req.URL.String(), Err: err}
}

// resetError is what net/http returns when the peer resets the connection:
// `Put "http://…": read tcp 127.0.0.1:10000: read: connection reset by peer`.
func resetError(req *http.Request) error {
	return urlError(req, &net.OpError{
		Op:   "read",
		Net:  "tcp",
		Addr: remoteAddr(req.URL),
		Err:  os.NewSyscallError("read", syscall.ECONNRESET),
	})
}

// remoteAddr is the server address for a net.OpError: a *net.TCPAddr when
// the URL names an IP, else the host name (no DNS lookup).
func remoteAddr(u *url.URL) net.Addr {
	host := u.Host
	if u.Port() == "" {
		if u.Scheme == "https" {
			host = net.JoinHostPort(u.Hostname(), "443")
		} else {
			host = net.JoinHostPort(u.Hostname(), "80")
		}
	}
	if ap, err := netip.ParseAddrPort(host); err == nil {
		return net.TCPAddrFromAddrPort(ap)
	}
	return hostAddr(host)
}

// hostAddr is a net.Addr for a host:port whose host is a name.
type hostAddr string

func (a hostAddr) Network() string { return "tcp" }
func (a hostAddr) String() string  { return string(a) }

// errorResponse builds a response like Azure Storage's error responses.
func errorResponse(req *http.Request, status int, code string) *http.Response {
	requestID := newRequestID()
	text := http.StatusText(status)
	if text == "" {
		text = "Status " + strconv.Itoa(status)
	}
	var escaped strings.Builder
	_ = xml.EscapeText(&escaped, []byte(code))
	body := fmt.Sprintf("<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>%s</Code>"+
		"<Message>Fault injected by internal/faults: %s.\nRequestId:%s\nTime:%s</Message></Error>",
		escaped.String(), text, requestID, time.Now().UTC().Format("2006-01-02T15:04:05.0000000Z"))
	if req.Method == http.MethodHead {
		body = "" // HEAD responses have no body; the code is in the header
	}
	h := make(http.Header)
	h.Set("Content-Type", "application/xml")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Ms-Error-Code", code)
	h.Set("X-Ms-Request-Id", requestID)
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	if id := requestHeader(req.Header, "x-ms-client-request-id"); id != "" {
		h.Set("X-Ms-Client-Request-Id", id)
	}
	return &http.Response{
		Status:        strconv.Itoa(status) + " " + text,
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// requestHeader reads a request header. The SDK's generated code sets its
// headers with lower-case keys straight into the map, so http.Header.Get,
// which canonicalises the key, does not find them.
func requestHeader(h http.Header, key string) string {
	if v := h.Get(key); v != "" {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// newRequestID returns a GUID-shaped ID like Azure's x-ms-request-id.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	return s[:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:]
}

// Transport must stay usable as azcore.ClientOptions.Transport.
var _ policy.Transporter = (*Transport)(nil)
