package memblob

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/blobelect/leaderelection/internal/azuritetest"
)

func TestMain(m *testing.M) { azuritetest.Main(m) }

// contractCase is one behaviour of the Blob service, run against Azurite and
// against the fake. run asserts what the service answers, as measured on
// Azurite; besides, every exchange is recorded (normalised: ETags become
// E1, E2... in order of appearance, the container's name becomes C) and the
// two transcripts must be equal, so that a difference the assertions do not
// name fails too.
type contractCase struct {
	name string
	// timed cases wait real time on Azurite (lease expiry, break periods,
	// Last-Modified's seconds). They run in parallel with each other;
	// against the fake they run in a synctest bubble, in virtual time.
	timed bool
	run   func(t *testing.T, e *env)
}

// env is what a case gets: SDK clients on a fresh container of one backend.
type env struct {
	ctx     context.Context
	backend string // "azurite" or "memblob"
	svc     *Service
	conn    string
	opts    azcore.ClientOptions
	name    string // the fresh container's
	cc      *container.Client
}

var containerSeq atomic.Int64

// containerName is a name not used before in this test binary, valid on
// Azure. Inside a synctest bubble time.Now is the same at every start, so
// the counter makes it unique.
func containerName() string {
	return fmt.Sprintf("mb%d-%d", time.Now().UnixNano()%1e9, containerSeq.Add(1))
}

// container returns a client for the container named suffix after the
// case's own (a second container of the same case).
func (e *env) container(t *testing.T, suffix string) *container.Client {
	t.Helper()
	cc, err := container.NewClientFromConnectionString(e.conn, e.name+suffix,
		&container.ClientOptions{ClientOptions: e.opts})
	if err != nil {
		t.Fatal(err)
	}
	return cc
}

// blob returns a block blob client for name in the case's container.
func (e *env) blob(name string) *blockblob.Client { return e.cc.NewBlockBlobClient(name) }

// lease returns a lease client for the blob name that proposes id.
func (e *env) lease(t *testing.T, name, id string) *lease.BlobClient {
	t.Helper()
	lc, err := lease.NewBlobClient(e.blob(name), &lease.BlobClientOptions{LeaseID: to.Ptr(id)})
	if err != nil {
		t.Fatal(err)
	}
	return lc
}

// put uploads name with content "x" and md, and fails the test unless it
// succeeds; it returns the new ETag.
func (e *env) put(t *testing.T, name string, md map[string]string) azcore.ETag {
	t.Helper()
	resp, err := e.blob(name).Upload(e.ctx, body("x"), &blockblob.UploadOptions{Metadata: meta(md)})
	if err != nil {
		t.Fatalf("upload %s: %v", name, err)
	}
	return *resp.ETag
}

// props returns name's properties, failing the test on an error.
func (e *env) props(t *testing.T, name string) blob.GetPropertiesResponse {
	t.Helper()
	p, err := e.blob(name).GetProperties(e.ctx, nil)
	if err != nil {
		t.Fatalf("get properties %s: %v", name, err)
	}
	return p
}

// acquire takes a lease on name for id, failing the test on an error.
func (e *env) acquire(t *testing.T, name, id string, secs int32) *lease.BlobClient {
	t.Helper()
	lc := e.lease(t, name, id)
	if _, err := lc.AcquireLease(e.ctx, secs, nil); err != nil {
		t.Fatalf("acquire %s for %s: %v", name, id, err)
	}
	return lc
}

// leaseState checks name's lease state, status and duration.
func (e *env) leaseState(t *testing.T, name string, state lease.StateType, status lease.StatusType, dur lease.DurationType) {
	t.Helper()
	p := e.props(t, name)
	if got := deref(p.LeaseState); got != state {
		t.Errorf("%s: lease state %q, want %q", name, got, state)
	}
	if got := deref(p.LeaseStatus); got != status {
		t.Errorf("%s: lease status %q, want %q", name, got, status)
	}
	if got := deref(p.LeaseDuration); got != dur {
		t.Errorf("%s: lease duration %q, want %q", name, got, dur)
	}
}

func body(s string) io.ReadSeekCloser { return streaming.NopCloser(strings.NewReader(s)) }

func meta(md map[string]string) map[string]*string {
	if md == nil {
		return nil
	}
	out := map[string]*string{}
	for k, v := range md {
		out[k] = to.Ptr(v)
	}
	return out
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// flat turns SDK metadata into a plain map.
func flat(md map[string]*string) map[string]string {
	out := map[string]string{}
	for k, v := range md {
		out[k] = deref(v)
	}
	return out
}

// wantErr checks that err is a ResponseError of status and code.
func wantErr(t *testing.T, err error, status int, code string) {
	t.Helper()
	var re *azcore.ResponseError
	if !errors.As(err, &re) {
		t.Errorf("got %v, want %d %s", err, status, code)
		return
	}
	if re.StatusCode != status || re.ErrorCode != code {
		t.Errorf("got %d %s, want %d %s", re.StatusCode, re.ErrorCode, status, code)
	}
	if !bloberror.HasCode(err, bloberror.Code(code)) {
		t.Errorf("bloberror.HasCode(err, %s) is false for %v", code, err)
	}
}

// noErr fails the test unless err is nil.
func noErr(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// staleETag is an ETag no blob has.
var staleETag = azcore.ETag(`"0x8D0000000000001"`)

// TestContract runs every contract case against Azurite and against the
// fake, and compares their transcripts.
func TestContract(t *testing.T) {
	names := map[string]bool{}
	for _, tc := range contractCases {
		if names[tc.name] {
			t.Fatalf("two cases named %s", tc.name)
		}
		names[tc.name] = true
		t.Run(tc.name, func(t *testing.T) {
			if tc.timed {
				t.Parallel()
			}
			az := &recorder{etags: map[string]string{}}
			mb := &recorder{etags: map[string]string{}}
			t.Run("azurite", func(t *testing.T) { runAzurite(t, tc, az) })
			t.Run("memblob", func(t *testing.T) { runMemblob(t, tc, mb) })
			if a, m := az.transcript(), mb.transcript(); !slices.Equal(a, m) {
				t.Errorf("the transcripts differ (- azurite, + memblob):\n%s", diff(a, m))
			}
		})
	}
}

// runAzurite runs tc against the shared Azurite, recording into rec.
func runAzurite(t *testing.T, tc contractCase, rec *recorder) {
	conn := azuritetest.ConnectionString(t)
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	rec.next = &http.Client{Transport: tr}
	runCase(t, tc, "azurite", conn, rec, nil)
}

// runMemblob runs tc against a fresh Service in a synctest bubble,
// recording into rec.
func runMemblob(t *testing.T, tc contractCase, rec *recorder) {
	synctest.Test(t, func(t *testing.T) {
		svc := New()
		rec.next = svc
		runCase(t, tc, "memblob", ConnectionString, rec, svc)
	})
}

// runCase runs tc on a fresh container reached through rec.
func runCase(t *testing.T, tc contractCase, backend, conn string, rec *recorder, svc *Service) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e := &env{
		ctx:     ctx,
		backend: backend,
		svc:     svc,
		conn:    conn,
		name:    containerName(),
		// No retries: every request is in the transcript once.
		opts: azcore.ClientOptions{Transport: rec, Retry: policy.RetryOptions{MaxRetries: -1}},
	}
	rec.setContainer(e.name)
	cc, err := container.NewClientFromConnectionString(conn, e.name, &container.ClientOptions{ClientOptions: e.opts})
	if err != nil {
		t.Fatal(err)
	}
	e.cc = cc
	if _, err := cc.Create(ctx, nil); err != nil {
		t.Fatalf("creating the case's container: %v", err)
	}
	tc.run(t, e)
}

// recorder is a transport that records a normalised line for each exchange.
type recorder struct {
	next      policy.Transporter
	container string

	mu        sync.Mutex
	lines     []string
	etags     map[string]string // ETag, unquoted -> E1, E2...
	divergent bool              // inside env.divergence: record nothing
}

func (r *recorder) setContainer(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.container = name
}

func (r *recorder) transcript() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// Do sends req on and records the exchange.
func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	reqLine := r.describeRequest(req)
	resp, err := r.next.Do(req)
	if err != nil {
		r.add(reqLine + " -> error " + describeSendError(err))
		return nil, err
	}
	payload, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(payload))
	r.add(reqLine + " -> " + r.describeResponse(req, resp, payload))
	return resp, nil
}

// describeSendError is a transport's error without the request's URL,
// which names Azurite's port or the fake's endpoint: the Op and the cause
// of a *url.Error, as http.Client returns it.
func describeSendError(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Sprintf("%T %s: %v", ue, ue.Op, ue.Err)
	}
	return err.Error()
}

func (r *recorder) add(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.divergent {
		r.lines = append(r.lines, line)
	}
}

// divergence runs f, whose requests the fake answers otherwise than Azurite
// on purpose, recording one line that says why instead of its exchanges.
// The case's assertions inside f still run on both backends: they state
// what the two share. Every use is a divergence listed in the package's
// report; there are very few.
func (e *env) divergence(why string, f func()) {
	rec := e.opts.Transport.(*recorder)
	rec.add("divergence: " + why)
	rec.mu.Lock()
	rec.divergent = true
	rec.mu.Unlock()
	defer func() {
		rec.mu.Lock()
		rec.divergent = false
		rec.mu.Unlock()
	}()
	f()
}

// etag maps an ETag to its symbol, E1 for the first seen and so on.
func (r *recorder) etag(v string) string {
	v = strings.Trim(v, `"`)
	if v == "" || v == "*" {
		return v
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	s, ok := r.etags[v]
	if !ok {
		s = fmt.Sprintf("E%d", len(r.etags)+1)
		r.etags[v] = s
	}
	return s
}

// describeRequest is the request's method, path below the account (the
// case's container as C), query, and the headers that matter.
func (r *recorder) describeRequest(req *http.Request) string {
	path := req.URL.Path
	if i := strings.Index(path[1:], "/"); i >= 0 {
		path = path[i+1:]
	}
	path = strings.ReplaceAll(path, r.container, "C")
	var b strings.Builder
	b.WriteString(req.Method + " " + path)
	q := req.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		b.WriteString(sep + k + "=" + q.Get(k))
	}
	for _, h := range []string{"x-ms-lease-action", "x-ms-lease-duration", "x-ms-lease-break-period",
		"x-ms-lease-id", "x-ms-proposed-lease-id"} {
		if v := reqHeader(req, h); v != "" {
			b.WriteString(" " + strings.TrimPrefix(h, "x-ms-") + "=" + v)
		}
	}
	for _, h := range []string{"If-Match", "If-None-Match"} {
		if v := reqHeader(req, h); v != "" {
			b.WriteString(" " + h + "=" + r.etag(v))
		}
	}
	return b.String()
}

// reqHeader reads a request header whatever the case of its name: the SDK
// sets most of its headers under non-canonical names.
func reqHeader(req *http.Request, name string) string {
	for k, vs := range req.Header {
		if strings.EqualFold(k, name) && len(vs) > 0 {
			return strings.Join(vs, ",")
		}
	}
	return ""
}

// describeResponse is the status, error code (header and body), ETag, lease
// headers, content length, metadata and, for a listing, its content.
func (r *recorder) describeResponse(req *http.Request, resp *http.Response, payload []byte) string {
	h := resp.Header
	var b strings.Builder
	fmt.Fprintf(&b, "%d", resp.StatusCode)
	if code := h.Get("X-Ms-Error-Code"); code != "" {
		b.WriteString(" " + code)
		if req.Method != http.MethodHead && resp.StatusCode != http.StatusNotModified {
			var body struct {
				Code string `xml:"Code"`
			}
			if err := xml.Unmarshal(payload, &body); err != nil || body.Code != code {
				fmt.Fprintf(&b, " (error body's code %q, %v)", body.Code, err)
			}
		}
	}
	if h.Get("Date") == "" {
		b.WriteString(" NO-DATE")
	}
	if h.Get("X-Ms-Request-Id") == "" {
		b.WriteString(" NO-REQUEST-ID")
	}
	if v := h.Get("Etag"); v != "" {
		b.WriteString(" etag=" + r.etag(v))
	}
	if h.Get("Last-Modified") != "" {
		b.WriteString(" last-modified")
	}
	for _, k := range []string{"X-Ms-Lease-Id", "X-Ms-Lease-State", "X-Ms-Lease-Status", "X-Ms-Lease-Duration",
		"X-Ms-Lease-Time", "X-Ms-Blob-Type"} {
		if v := h.Get(k); v != "" {
			b.WriteString(" " + strings.ToLower(strings.TrimPrefix(k, "X-Ms-")) + "=" + v)
		}
	}
	blobRead := (req.Method == http.MethodHead || req.Method == http.MethodGet) && req.URL.Query().Get("restype") == ""
	if blobRead && resp.StatusCode == http.StatusOK {
		b.WriteString(" length=" + h.Get("Content-Length"))
	}
	var md []string
	for k := range h {
		if strings.HasPrefix(k, "X-Ms-Meta-") {
			md = append(md, strings.TrimPrefix(k, "X-Ms-Meta-")+"="+h.Get(k))
		}
	}
	if len(md) > 0 {
		slices.Sort(md)
		b.WriteString(" meta{" + strings.Join(md, ",") + "}")
	}
	if req.URL.Query().Get("comp") == "list" && resp.StatusCode == http.StatusOK {
		b.WriteString(" " + r.describeListing(payload))
	} else if blobRead && req.Method == http.MethodGet && resp.StatusCode == http.StatusOK {
		fmt.Fprintf(&b, " body=%q", payload)
	}
	return b.String()
}

// listing is the part of an EnumerationResults the transcript shows.
type listing struct {
	ContainerName string `xml:"ContainerName,attr"`
	Prefix        string `xml:"Prefix"`
	Marker        string `xml:"Marker"`
	MaxResults    string `xml:"MaxResults"`
	NextMarker    string `xml:"NextMarker"`
	Blobs         []struct {
		Name       string `xml:"Name"`
		Properties struct {
			Etag          string `xml:"Etag"`
			LastModified  string `xml:"Last-Modified"`
			ContentLength string `xml:"Content-Length"`
			BlobType      string `xml:"BlobType"`
			LeaseStatus   string `xml:"LeaseStatus"`
			LeaseState    string `xml:"LeaseState"`
			LeaseDuration string `xml:"LeaseDuration"`
		} `xml:"Properties"`
		Metadata *struct {
			Items []struct {
				XMLName xml.Name
				Value   string `xml:",chardata"`
			} `xml:",any"`
		} `xml:"Metadata"`
	} `xml:"Blobs>Blob"`
}

func (r *recorder) describeListing(payload []byte) string {
	var l listing
	if err := xml.Unmarshal(payload, &l); err != nil {
		return fmt.Sprintf("unparsable listing: %v: %q", err, payload)
	}
	var b strings.Builder
	// Listings never show lease IDs or expiry times (LEASE-FACTS).
	for _, secret := range []string{"LeaseId", "LeaseExpir", "LeaseBreak"} {
		if bytes.Contains(payload, []byte(secret)) {
			fmt.Fprintf(&b, "LISTS-%s ", secret)
		}
	}
	fmt.Fprintf(&b, "list[container=%s prefix=%q marker=%q max=%s next=%q",
		strings.ReplaceAll(l.ContainerName, r.container, "C"), l.Prefix, l.Marker, l.MaxResults, l.NextMarker)
	for _, x := range l.Blobs {
		p := x.Properties
		fmt.Fprintf(&b, " {%s etag=%s lm=%t len=%s type=%s lease=%s/%s/%s", x.Name, r.etag(p.Etag),
			p.LastModified != "", p.ContentLength, p.BlobType, p.LeaseStatus, p.LeaseState, p.LeaseDuration)
		if x.Metadata != nil {
			var md []string
			for _, it := range x.Metadata.Items {
				md = append(md, it.XMLName.Local+"="+it.Value)
			}
			slices.Sort(md)
			b.WriteString(" meta{" + strings.Join(md, ",") + "}")
		}
		b.WriteString("}")
	}
	b.WriteString("]")
	return b.String()
}

// diff shows two transcripts line by line, marking the lines that differ.
func diff(a, b []string) string {
	var out strings.Builder
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x == y {
			fmt.Fprintf(&out, "  %s\n", x)
			continue
		}
		fmt.Fprintf(&out, "- %s\n+ %s\n", x, y)
	}
	return out.String()
}
