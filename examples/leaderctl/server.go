package main

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// serverView sees in the answers to the library's requests two things the
// library reads there but does not return:
//
//   - whether storage said the container does not exist. The library takes
//     that as "nothing there yet" (a blob nobody has contended for, a prefix
//     with no session), which is right for a fleet about to create it but
//     hides a mistyped -container from an operator;
//   - the server's clock (the Date header) when it listed a ShardOwner's
//     sessions, against which their blobs' Last-Modified, also the
//     server's, are judged: our own clock may disagree with it.
//
// Like blobPeek it is a policy of the library's own pipeline, and it sends
// nothing of its own. Whether the container exists is read from the answer
// to the request the command makes anyway, not from a request for the
// container's properties, which a SAS may not be allowed to read (a 403
// there would tell us nothing): a refused request fails the command as any
// other, and only an explicit ContainerNotFound says the container is
// missing.
type serverView struct {
	// sessions is the listing prefix of a ShardOwner's sessions
	// ("<prefix>/sessions/"), whose Date is kept; "" for none.
	sessions string

	mu      sync.Mutex
	missing bool      // an answer since begin said ContainerNotFound
	date    time.Time // the Date of the first listing of sessions since begin; zero if none gave one
	sent    *url.URL  // where the first request since begin went, answered or not
}

// begin forgets what the answers of an earlier command said.
func (v *serverView) begin() {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.missing, v.date, v.sent = false, time.Time{}, nil
}

// Do passes the library's request on, and looks at the answer.
func (v *serverView) Do(req *policy.Request) (*http.Response, error) {
	v.mu.Lock()
	if v.sent == nil {
		v.sent = req.Raw().URL
	}
	v.mu.Unlock()
	resp, err := req.Next()
	if err != nil {
		return resp, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if resp.StatusCode == http.StatusNotFound && resp.Header.Get("x-ms-error-code") == string(bloberror.ContainerNotFound) {
		v.missing = true
	}
	q := req.Raw().URL.Query()
	if v.sessions != "" && v.date.IsZero() && req.Raw().Method == http.MethodGet && q.Get("comp") == "list" && q.Get("prefix") == v.sessions {
		// The first page's: a blob on a later page was read later, so its
		// silence is understated, never overstated. Date has whole seconds,
		// as has Last-Modified.
		if d, perr := http.ParseTime(resp.Header.Get("Date")); perr == nil {
			v.date = d
		}
	}
	return resp, err
}

// containerMissing reports whether an answer since begin said the container
// does not exist.
func (v *serverView) containerMissing() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.missing
}

// listedAt is the server's clock when it listed the sessions, zero if its
// answer gave none.
func (v *serverView) listedAt() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.date
}

// endpoint is the account the first request since begin went to, as the
// library's own client resolved it from a connection string, an account URL
// or a SAS URL: its scheme, host and path, less the container and the blob
// (Azurite's path names the account). The query, where a SAS token lies, is
// never shown. "" before a request was sent.
func (v *serverView) endpoint(container, blob string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.sent == nil {
		return ""
	}
	path := strings.TrimSuffix(v.sent.Path, "/"+container+"/"+blob)
	return (&url.URL{Scheme: v.sent.Scheme, Host: v.sent.Host, Path: path}).String()
}

// containerMissing is the error of status and shards when storage says the
// container does not exist.
func containerMissing(container string) error {
	return fmt.Errorf("container %s does not exist: check -container", container)
}
