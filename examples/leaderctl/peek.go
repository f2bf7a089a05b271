package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/blobelect/leaderelection"
	"github.com/blobelect/leaderelection/internal/wire"
)

// blobPeek shows leaderctl what the library's Inspect reads of a blob but
// does not return: the metadata a held list or a handoff note carries (its
// count, its entries), and a held list's body. It rides on the library's
// own client, as a policy of its pipeline (BlobSettings.ClientOptions): that
// client is the only one that reaches the account every way leaderctl can
// be told to (a connection string, UseDevelopmentStorage=true included, an
// account URL and its credential, a SAS URL), and a second client built here
// would have to parse all of them again, and could disagree.
//
// It keeps the headers of each blob properties request (HEAD) that
// succeeds. With body, when those say the blob is a held list (or, with
// byName, whatever they say: its name is a held list's) and its ETag is not
// that of the body it read last,
// it reads the body too: a GET of the same URL, through the rest of the same
// pipeline (its retries, its authentication), If-Match the ETag the HEAD
// returned, so that the body and the metadata are of one version. A list
// longer than the library reads (wire.MaxHeldBytes) is not read.
type blobPeek struct {
	body   bool // read a held list's body
	byName bool // read the body whatever the role says: the blob's name is a held list's

	mu       sync.Mutex
	header   http.Header // the last HEAD's answer; nil before one succeeds
	text     []byte      // the body last read
	textETag string      // the ETag of the body last read, "" if none was
	textErr  error       // why the last read of the body failed
}

// options installs the peek in the library's pipeline, for
// BlobSettings.ClientOptions. Without a Transport the library still uses one
// of its own, which the session's close closes.
func (p *blobPeek) options() *azblob.ClientOptions {
	return &azblob.ClientOptions{ClientOptions: azcore.ClientOptions{PerCallPolicies: []policy.Policy{p}}}
}

// Do passes the library's request on, and looks at the answer.
func (p *blobPeek) Do(req *policy.Request) (*http.Response, error) {
	resp, err := req.Next()
	if err != nil || req.Raw().Method != http.MethodHead || resp.StatusCode != http.StatusOK {
		return resp, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.header = resp.Header.Clone()
	etag := resp.Header.Get("ETag")
	held := strings.EqualFold(metaHeader(resp.Header, wire.MetaRole), string(leaderelection.RoleHeld))
	if !p.body || !(held || p.byName) || etag == "" || etag == p.textETag {
		return resp, err
	}
	if n, perr := strconv.ParseInt(resp.Header.Get("Content-Length"), 10, 64); perr != nil || n > wire.MaxHeldBytes {
		// Too long for the library to read (or of no length it says): the
		// list's report says so, from the headers.
		p.text, p.textETag, p.textErr = nil, "", nil
		return resp, err
	}
	get := req.Clone(req.Raw().Context())
	get.Raw().Method = http.MethodGet
	get.Raw().Header.Set("If-Match", etag)
	got, gerr := get.Next()
	p.text, p.textETag, p.textErr = nil, "", nil
	switch {
	case gerr != nil:
		p.textErr = gerr
	case got.StatusCode != http.StatusOK:
		p.textErr = fmt.Errorf("%s", got.Status)
		if got.StatusCode == http.StatusPreconditionFailed {
			p.textErr = errors.New("it was rewritten between two reads (its session rewrites it as its shards change): run status again")
		}
	default:
		p.text, p.textErr = io.ReadAll(io.LimitReader(got.Body, wire.MaxHeldBytes+1))
		if p.textErr == nil {
			p.textETag = etag
		}
	}
	if got != nil && got.Body != nil {
		_ = got.Body.Close()
	}
	return resp, err
}

// peeked is what the peek saw of the blob, at its last HEAD.
type peeked struct {
	header   http.Header // nil if no HEAD succeeded
	text     []byte
	textRead bool // text is the body of the version header describes
	textErr  error
}

func (p *blobPeek) seen() peeked {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := peeked{header: p.header, text: p.text, textErr: p.textErr}
	out.textRead = p.header != nil && p.textETag != "" && p.textETag == p.header.Get("ETag")
	return out
}

// meta is the metadata value of key, as stored; "" if the blob has none.
func (p peeked) meta(key string) (string, bool) {
	if p.header == nil {
		return "", false
	}
	v, ok := p.header[http.CanonicalHeaderKey("x-ms-meta-"+key)]
	if !ok || len(v) == 0 {
		return "", false
	}
	return v[0], true
}

// size is the blob's length, as the HEAD said; -1 if it said none.
func (p peeked) size() int64 {
	if p.header == nil {
		return -1
	}
	n, err := strconv.ParseInt(p.header.Get("Content-Length"), 10, 64)
	if err != nil {
		return -1
	}
	return n
}

func metaHeader(h http.Header, key string) string {
	return h.Get("x-ms-meta-" + key)
}

// readError says why a read failed, without the request's URL: a SAS URL's
// query is a secret.
func readError(err error) string {
	var re *azcore.ResponseError
	var ue *url.Error
	switch {
	case errors.As(err, &re):
		if re.ErrorCode != "" {
			return fmt.Sprintf("%d %s", re.StatusCode, re.ErrorCode)
		}
		return strconv.Itoa(re.StatusCode) + " " + http.StatusText(re.StatusCode)
	case errors.As(err, &ue):
		return ue.Err.Error()
	}
	return err.Error()
}
