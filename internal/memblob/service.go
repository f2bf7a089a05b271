package memblob

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
)

const (
	// AccountName is Azurite's well-known development account, the one
	// ConnectionString names.
	AccountName = "devstoreaccount1"

	// AccountKey is the development account's published key. The service
	// ignores Authorization headers; the key is here only because the SDK
	// needs one to build clients from a connection string.
	AccountKey = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

	// Endpoint is the blob endpoint of ConnectionString: Azurite's default
	// address. Clients whose transport is a Service never dial it.
	Endpoint = "http://127.0.0.1:10000/" + AccountName

	// ConnectionString builds SDK clients for a Service: path-style URLs
	// (/devstoreaccount1/<container>/<blob>) as against Azurite. Pass
	// Service.ClientOptions along with it.
	ConnectionString = "DefaultEndpointsProtocol=http;AccountName=" + AccountName +
		";AccountKey=" + AccountKey + ";BlobEndpoint=" + Endpoint + ";"

	// APIVersion is the x-ms-version every response carries: Azurite
	// 3.37's, whatever version the client asked for (Azurite runs with
	// --skipApiVersionCheck here, so it does the same).
	APIVersion = "2026-06-06"

	// MaxListResults is the default and the largest page of List Blobs, as
	// on Azure and Azurite: a larger maxresults is cut down to it.
	MaxListResults = 5000
)

// Service is an in-memory Blob service that answers SDK requests as Azurite
// does. It implements azcore's policy.Transporter. Create it with New; it
// is safe for concurrent use, and all its state is guarded by one lock, so
// requests take effect one at a time in a single order, which the observer
// sees.
type Service struct {
	now      func() time.Time
	observer func(Event)

	mu         sync.Mutex
	containers map[string]*containerState
	etagSeq    uint64 // the last ETag handed out; ETags are never reused
	requestSeq uint64 // the last x-ms-request-id handed out
	leaseSeq   uint64 // the last lease ID the service made up itself
}

// Option configures a Service in New.
type Option func(*Service)

// WithClock makes the service keep time on now instead of time.Now. Every
// request reads it once, under the service's lock: that instant is the
// request's Date, any Last-Modified it sets, and the instant against which
// lease expiry and break periods are judged.
func WithClock(now func() time.Time) Option {
	return func(s *Service) { s.now = now }
}

// WithObserver makes the service call fn with every request it applied or
// refused, and with every admin change, in the order they took effect. fn
// runs under the service's lock, so it sees a consistent order but must not
// call the Service's methods (they would deadlock) and should be quick.
// Requests that never reached the service (headers net/http would not
// send, a context already done, a body that could not be read) are not
// reported.
func WithObserver(fn func(Event)) Option {
	return func(s *Service) { s.observer = fn }
}

// New returns an empty service: no containers, no blobs.
func New(opts ...Option) *Service {
	s := &Service{now: time.Now, containers: map[string]*containerState{}}
	for _, o := range opts {
		o(s)
	}
	return s
}

// ClientOptions returns SDK client options whose transport is s. Retries
// and other policies keep the SDK's defaults; a caller can change them on
// the returned value.
func (s *Service) ClientOptions() azcore.ClientOptions {
	return azcore.ClientOptions{Transport: s}
}

// Do answers one HTTP request of the Blob REST API, as policy.Transporter
// requires. A request net/http would not send gets its error (unsendable),
// and the request's context is honoured as a real transport would: a
// context already done gets its error; both are wrapped in *url.Error, as
// http.Client returns them, and the request is not applied. Once the request
// has been read it is applied atomically; there is nothing left to cancel.
func (s *Service) Do(req *http.Request) (*http.Response, error) {
	if err := unsendable(req); err != nil {
		closeBody(req)
		return nil, &url.Error{Op: urlOp(req.Method), URL: req.URL.String(), Err: err}
	}
	if err := req.Context().Err(); err != nil {
		closeBody(req)
		return nil, &url.Error{Op: urlOp(req.Method), URL: req.URL.String(), Err: err}
	}
	var body []byte
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		closeBody(req)
		if err != nil {
			return nil, &url.Error{Op: urlOp(req.Method), URL: req.URL.String(), Err: err}
		}
		body = b
	}
	// The SDK checks its context between reading the body and sending; a
	// real transport would notice a cancellation during the upload too.
	if err := req.Context().Err(); err != nil {
		return nil, &url.Error{Op: urlOp(req.Method), URL: req.URL.String(), Err: err}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	c := &call{req: req, body: body, now: s.now(), headers: lowerHeaders(req.Header)}
	s.requestSeq++
	c.requestID = fmt.Sprintf("%08x-0000-4000-8000-%012x", s.requestSeq>>48, s.requestSeq&(1<<48-1))
	c.parsePath()
	c.route()
	s.serve(c)
	if s.observer != nil {
		s.observer(c.event())
	}
	return c.response(), nil
}

// unsendable is the error net/http's transport returns, before it sends
// anything, for a request whose headers HTTP/1.1 cannot carry: a name that
// is not a token (a metadata name with a space or a non-ASCII letter), a
// value with a control character (a newline above all). Against storage
// such a request never leaves the client; here it never reaches the
// service, and the observer does not see it.
func unsendable(req *http.Request) error {
	for k, vs := range req.Header {
		if k == "" || strings.IndexFunc(k, notToken) >= 0 {
			return fmt.Errorf("net/http: invalid header field name %q", k)
		}
		for _, v := range vs {
			if strings.IndexFunc(v, isCTL) >= 0 {
				// As net/http: the value may be secret.
				return fmt.Errorf("net/http: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// notToken and isCTL are net/http's rules (golang.org/x/net/http/httpguts's
// ValidHeaderFieldName and ValidHeaderFieldValue): a name is a token of
// RFC 9110 (ASCII letters, digits and !#$%&'*+-.^_`|~); a value has no
// control character but the tab.
func notToken(r rune) bool {
	alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
	return !alnum && !strings.ContainsRune("!#$%&'*+-.^_`|~", r)
}

func isCTL(r rune) bool { return r < ' ' && r != '\t' || r == 0x7f }

// closeBody closes a request's body, as a transport must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

// urlOp is the Op of the *url.Error that http.Client returns for method.
func urlOp(method string) string {
	if method == "" {
		return "Get"
	}
	return method[:1] + strings.ToLower(method[1:])
}

// call is one request being answered: what was asked, and the answer.
type call struct {
	req       *http.Request
	body      []byte
	now       time.Time
	requestID string
	headers   map[string]string // the request's headers by lower-case name

	account, container, blob string
	op                       Op

	// The answer.
	status  int
	header  http.Header
	errCode string
	errMsg  string
	payload []byte

	// What the observer is told about the target after the request.
	result blobResult
}

// blobResult is the state of the request's target after the request, for
// the observer.
type blobResult struct {
	etag        string // unquoted; "" when the target does not exist
	leaseState  string
	leaseID     string
	leaseExpiry time.Time
	metadata    map[string]string // the blob's, shared: never changed in place, only replaced
}

// lowerHeaders indexes h by lower-case name. The SDK sets most of its
// headers with non-canonical names (h["x-ms-lease-id"] = ...), which
// http.Header.Get does not find; a server reading the wire sees no case.
// Repeated headers are joined with commas, as Node joins them for Azurite.
func lowerHeaders(h http.Header) map[string]string {
	m := make(map[string]string, len(h))
	for k, vs := range h {
		k = strings.ToLower(k)
		if prev, ok := m[k]; ok {
			m[k] = prev + "," + strings.Join(vs, ",")
		} else {
			m[k] = strings.Join(vs, ",")
		}
	}
	return m
}

// get returns the request header name, whatever the case of its name.
func (c *call) get(name string) string {
	return c.headers[strings.ToLower(name)]
}

// parsePath splits the request's path into account, container and blob, as
// Azurite does for path-style URLs: the blob name is the rest of the path,
// slashes included, with backslashes turned into slashes (Azure does the
// same).
func (c *call) parsePath() {
	p := strings.TrimPrefix(c.req.URL.Path, "/")
	parts := strings.SplitN(p, "/", 3)
	c.account = parts[0]
	if len(parts) > 1 {
		c.container = parts[1]
	}
	if len(parts) > 2 {
		c.blob = strings.ReplaceAll(parts[2], `\`, "/")
	}
}

// route decides the request's operation from its method, path and query.
func (c *call) route() {
	q := c.req.URL.Query()
	comp := q.Get("comp")
	restype := q.Get("restype")
	m := c.req.Method
	switch {
	case c.container == "":
		c.op = OpUnsupported
	case c.blob == "" && restype == "container":
		switch {
		case m == http.MethodPut && comp == "":
			c.op = OpCreateContainer
		case m == http.MethodDelete && comp == "":
			c.op = OpDeleteContainer
		case (m == http.MethodGet || m == http.MethodHead) && comp == "":
			c.op = OpGetContainerProperties
		case m == http.MethodGet && comp == "list":
			c.op = OpList
		default:
			c.op = OpUnsupported
		}
	case c.blob == "":
		c.op = OpUnsupported
	default:
		switch {
		case m == http.MethodPut && comp == "" && c.get("x-ms-copy-source") == "":
			c.op = OpUpload
		case m == http.MethodPut && comp == "metadata":
			c.op = OpSetMetadata
		case m == http.MethodPut && comp == "lease":
			switch strings.ToLower(c.get("x-ms-lease-action")) {
			case "acquire":
				c.op = OpAcquire
			case "renew":
				c.op = OpRenew
			case "release":
				c.op = OpRelease
			case "break":
				c.op = OpBreak
			case "change":
				c.op = OpChange
			default:
				c.op = OpUnsupported
			}
		case m == http.MethodHead && comp == "":
			c.op = OpGetProperties
		case m == http.MethodGet && comp == "":
			c.op = OpDownload
		case m == http.MethodDelete && comp == "":
			c.op = OpDelete
		default:
			c.op = OpUnsupported
		}
		// Snapshots, versions and ranges are outside the fake's contract:
		// answering them as if they were the plain request would be a lie.
		if q.Get("snapshot") != "" || q.Get("versionid") != "" ||
			c.get("x-ms-range") != "" || c.get("Range") != "" {
			c.op = OpUnsupported
		}
	}
}

// fail sets an error answer: status, x-ms-error-code, and the message that
// goes into the reason phrase and the XML body, as Azurite sends them.
func (c *call) fail(status int, code string) {
	c.status, c.errCode = status, code
	c.errMsg = messages[code]
	if c.errMsg == "" {
		c.errMsg = http.StatusText(status)
	}
}

// failf is fail with a message of its own.
func (c *call) failf(status int, code, format string, args ...any) {
	c.status, c.errCode, c.errMsg = status, code, fmt.Sprintf(format, args...)
}

// ok sets a successful status and returns the header to fill.
func (c *call) ok(status int) http.Header {
	c.status = status
	if c.header == nil {
		c.header = http.Header{}
	}
	return c.header
}

// response builds the *http.Response of the call.
func (c *call) response() *http.Response {
	h := c.header
	if h == nil {
		h = http.Header{}
	}
	h.Set("Date", c.now.UTC().Format(http.TimeFormat))
	h.Set("X-Ms-Request-Id", c.requestID)
	// Azurite leaves x-ms-version out of its error answers; Azure, and
	// the fake, send it on every answer.
	h.Set("X-Ms-Version", APIVersion)
	h.Set("Server", "memblob")
	if cr := c.get("x-ms-client-request-id"); cr != "" {
		h.Set("X-Ms-Client-Request-Id", cr)
	}
	reason := http.StatusText(c.status)
	body := c.payload
	if c.errCode != "" {
		h.Set("X-Ms-Error-Code", c.errCode)
		reason = c.errMsg
		if c.req.Method != http.MethodHead && c.status != http.StatusNotModified {
			h.Set("Content-Type", "application/xml")
			body = errorBody(c.errCode, c.errMsg, c.requestID, c.now)
		}
	}
	if c.req.Method == http.MethodHead {
		body = nil
	}
	if h.Get("Content-Length") == "" {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	}
	var rc io.ReadCloser = http.NoBody
	if len(body) > 0 {
		rc = io.NopCloser(bytes.NewReader(body))
	}
	// As net/http reports it: a HEAD answer's length is the one its
	// header announces, though no body follows.
	length := int64(len(body))
	if c.req.Method == http.MethodHead {
		length, _ = strconv.ParseInt(h.Get("Content-Length"), 10, 64)
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", c.status, reason),
		StatusCode:    c.status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        h,
		Body:          rc,
		ContentLength: length,
		Request:       c.req,
	}
}

// errorBody is the XML body of an error answer, as Azurite writes it: the
// SDK's ResponseError shows it, and bloberror reads the code from the
// x-ms-error-code header or from here.
func errorBody(code, msg, requestID string, now time.Time) []byte {
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8" standalone="yes"?>` + "\n<Error>\n  <Code>")
	xmlEscape(&b, code)
	b.WriteString("</Code>\n  <Message>")
	xmlEscape(&b, msg+"\nRequestId:"+requestID+"\nTime:"+now.UTC().Format("2006-01-02T15:04:05.000Z"))
	b.WriteString("</Message>\n</Error>")
	return b.Bytes()
}

// messages are Azurite's messages for the error codes the service answers.
var messages = map[string]string{
	"ContainerNotFound":                    "The specified container does not exist.",
	"ContainerAlreadyExists":               "The specified container already exists.",
	"BlobNotFound":                         "The specified blob does not exist.",
	"BlobAlreadyExists":                    "The specified blob already exists.",
	"InvalidHeaderValue":                   "The value for one of the HTTP headers is not in the correct format.",
	"MissingRequiredHeader":                "An HTTP header that's mandatory for this request is not specified.",
	"LeaseAlreadyPresent":                  "There is already a lease present.",
	"LeaseIsBreakingAndCannotBeAcquired":   "There is already a breaking lease, and can't  be acquired.",
	"LeaseNotPresentWithLeaseOperation":    "There is currently no lease on the container or blob.",
	"LeaseIdMismatchWithLeaseOperation":    "The lease ID specified did not match the lease ID for the container or blob.",
	"LeaseIsBrokenAndCannotBeRenewed":      "The lease ID matched, but the lease has been broken explicitly and cannot be renewed.",
	"LeaseIsBreakingAndCannotBeChanged":    "The lease ID matched, but the lease is currently in breaking state and cannot be changed.",
	"LeaseIdMissing":                       "There is currently a lease on the blob and no lease ID was specified in the request.",
	"LeaseIdMismatchWithBlobOperation":     "The lease ID specified did not match the lease ID for the blob.",
	"LeaseNotPresentWithBlobOperation":     "A lease ID was specified, but the lease for the blob has expired.",
	"ConditionNotMet":                      "The condition specified using HTTP conditional header(s) is not met.",
	"MultipleConditionHeadersNotSupported": "Multiple condition headers are not supported.",
	"UnsatisfiableCondition":               "The request includes an unsatisfiable condition for this operation.",
	"InvalidMetadata":                      "The metadata specified is invalid. It has characters that are not permitted.",
	"InvalidResourceName":                  "The specified resource name contains invalid characters.",
	"OutOfRangeInput":                      "The specified resource name length is not within the permissible limits.",
	"OutOfRangeQueryParameterValue":        "One of the query parameters specified in the request URI is outside the permissible range.",
	"InvalidQueryParameterValue":           "Value for one of the query parameters specified in the request URI is invalid.",
	"AuthorizationFailure":                 "Server failed to authenticate the request. Make sure the value of the Authorization header is formed correctly including the signature.",
}

// serve answers the call: it checks what Azurite checks first (the
// container's name), then runs the operation.
func (s *Service) serve(c *call) {
	if c.op == OpUnsupported {
		c.failf(http.StatusNotImplemented, "NotImplemented",
			"memblob does not implement %s %s?%s", c.req.Method, c.req.URL.Path, c.req.URL.RawQuery)
		return
	}
	if !validContainerName(c) || !signedAsSent(c) {
		return
	}
	switch c.op {
	case OpCreateContainer:
		s.createContainer(c)
	case OpDeleteContainer:
		s.deleteContainer(c)
	case OpGetContainerProperties:
		s.getContainerProperties(c)
	case OpList:
		s.list(c)
	case OpUpload:
		s.upload(c)
	case OpGetProperties, OpDownload:
		s.read(c)
	case OpSetMetadata:
		s.setMetadata(c)
	case OpDelete:
		s.deleteBlob(c)
	case OpAcquire, OpRenew, OpRelease, OpBreak, OpChange:
		s.leaseOp(c)
	}
}

// validContainerName applies Azurite's check of container names (3 to 63
// lower-case letters, digits and single hyphens, starting and ending with a
// letter or digit), which it makes before anything else.
func validContainerName(c *call) bool {
	n := c.container
	if strings.HasPrefix(n, "$") { // system containers ($root, $logs...)
		return true
	}
	if len(n) < 3 || len(n) > 63 {
		c.fail(http.StatusBadRequest, "OutOfRangeInput")
		return false
	}
	for i := 0; i < len(n); i++ {
		ch := n[i]
		alnum := ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9'
		if !alnum && (ch != '-' || i == 0 || i == len(n)-1 || n[i-1] == '-') {
			c.fail(http.StatusBadRequest, "InvalidResourceName")
			return false
		}
	}
	return true
}

// signedAsSent applies Azurite's Shared Key check as far as it can fail for
// a client that holds the right key: on the x-ms-* headers, which the
// signature covers (metadata among them). The SDK signs each header's value
// as it holds it; the server reads it as HTTP delivers it: with spaces and
// tabs at either end trimmed, bytes above 0x7f read as Latin-1, and a
// header sent twice (two names that differ only in case, as two metadata
// names may) joined into one. Where the two differ the signature does not
// match: 403 AuthorizationFailure, checked after the container's name and
// before anything else, as Azurite does.
//
// Azurite divergence: Azure answers 403 AuthenticationFailed, and
// documents 400 for a metadata name sent twice.
//
// The fake takes every request as signed with the account's key, as
// clients built from ConnectionString sign them: a value storage would
// refuse from them is refused from any client.
func signedAsSent(c *call) bool {
	values := map[string]int{} // by lower-case name
	ok := true
	for k, vs := range c.req.Header {
		name := strings.ToLower(k)
		if !strings.HasPrefix(name, "x-ms-") {
			continue
		}
		values[name] += len(vs)
		for _, v := range vs {
			ok = ok && strings.Trim(v, " \t") == v && isASCII(v)
		}
	}
	for _, n := range values {
		ok = ok && n == 1
	}
	if !ok {
		c.fail(http.StatusForbidden, "AuthorizationFailure")
	}
	return ok
}

// isASCII reports whether s has no byte above 0x7f.
func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] > 0x7f {
			return false
		}
	}
	return true
}

// newETag returns a fresh ETag, unquoted, in Azure's format (0x and at
// least 15 upper-case hex digits). A counter, not the clock: two writes in
// the same instant must differ, and a run is reproducible.
func (s *Service) newETag() string {
	s.etagSeq++
	return fmt.Sprintf("0x8DE%013X", s.etagSeq)
}

// newLeaseID makes up a lease ID for an acquire that proposed none, as
// Azure does (a GUID). Sequential, so that runs are reproducible.
func (s *Service) newLeaseID() string {
	s.leaseSeq++
	return fmt.Sprintf("00000000-0000-4000-a000-%012x", s.leaseSeq)
}

// quote puts an unquoted ETag in quotes, as ETag headers carry it.
func quote(etag string) string {
	if etag == "" {
		return ""
	}
	return `"` + etag + `"`
}

// sortedKeys returns m's keys in order, so that output is deterministic.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
