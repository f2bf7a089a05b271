package blobstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Errors without an answer are sorted by what can cure them (moved here
// from the root package with the classification).
func TestNetworkErrorsAreClassified(t *testing.T) {
	nx := &net.DNSError{Err: "no such host", Name: "acct.blob.core.windows.net", IsNotFound: true}
	_, kind := classifyNoResponse(&url.Error{Op: "PUT", URL: "https://acct.blob.core.windows.net/x", Err: nx}, false)
	assert.Equal(t, Permanent, kind, "a host that never resolved is a misspelt account")
	_, kind = classifyNoResponse(&url.Error{Op: "PUT", URL: "https://acct.blob.core.windows.net/x", Err: nx}, true)
	assert.Equal(t, Transient, kind, "a host that resolved before is having an outage")
	_, kind = classifyNoResponse(fmt.Errorf("token: %w", context.DeadlineExceeded), false)
	assert.Equal(t, Transient, kind)
	_, kind = classifyNoResponse(nonRetriableTimeout{}, false)
	assert.Equal(t, Transient, kind, "azcore marks a timed-out token request NonRetriable: still a timeout")
	_, kind = classifyNoResponse(errors.New("authenticated requests are not permitted for non TLS protected (https) endpoints"), false)
	assert.Equal(t, Permanent, kind)
}

type nonRetriableTimeout struct{}

func (nonRetriableTimeout) Error() string { return "credential unavailable: context deadline exceeded" }
func (nonRetriableTimeout) NonRetriable() {}
func (nonRetriableTimeout) Unwrap() error { return context.DeadlineExceeded }
