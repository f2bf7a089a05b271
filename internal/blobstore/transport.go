package blobstore

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// newTransport returns the HTTP transport the package uses when the caller
// brings none. It has the settings of the Azure SDK's shared default (which
// the library would otherwise get), but a pool of its own: the SDK's is
// process-wide, so its pooled connections, and a goroutine pair for each,
// would outlive the library's use of storage; ours are closed by
// CloseIdleConnections.
func newTransport() *http.Transport {
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		TLSClientConfig: &tls.Config{
			MinVersion:    tls.VersionTLS12,
			Renegotiation: tls.RenegotiateFreelyAsClient,
		},
		// An HTTP/2 connection that went silent is found out by a ping,
		// not left to carry every later request into its timeout.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
	}
}

// CloseIdleConnections closes the idle pooled connections of the HTTP
// transport the package built for this client, and so their goroutines.
// The package builds one when the config brings no transport of its own
// (ClientOptions nil or without a Transport, and no Client); for a caller's
// transport or Client this does nothing: that pool is the caller's to
// manage.
//
// Call it when done with the client (a later request simply opens a new
// connection). It is safe to call at any time, concurrently with requests:
// connections in use are not affected.
func (cl *Client) CloseIdleConnections() {
	if cl.transport != nil {
		cl.transport.CloseIdleConnections()
	}
}

// OwnsTransport reports whether the client uses an HTTP transport the
// package built (see [Client.CloseIdleConnections]).
func (cl *Client) OwnsTransport() bool { return cl.transport != nil }
