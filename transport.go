package leaderelection

import (
	"crypto/tls"
	"net"
	"net/http"
	"time"
)

// newTransport returns the HTTP transport the library uses when the caller
// brings none. It has the settings of the Azure SDK's shared default (which
// the library would otherwise get), but a pool of its own: the SDK's is
// process-wide, so its pooled connections, and a goroutine pair for each,
// would outlive RunTaskWhenMutexAcquired; ours are closed when it returns
// (see [BlobLeaseManager.CloseIdleConnections]).
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
// transport the library built for this manager, and so their goroutines. The
// library builds one when the settings bring no transport of their own
// (ClientOptions nil or without a Transport, and no Client); for a caller's
// transport or Client it does nothing: that pool is the caller's to manage.
//
// [BlobDistributedMutex.RunTaskWhenMutexAcquired] calls it when it returns.
// Callers who use the manager directly call it when they are done with it
// (a later request simply opens a new connection). It is safe to call at any
// time, concurrently with requests: connections in use are not affected.
func (m *BlobLeaseManager) CloseIdleConnections() {
	if m.transport != nil {
		m.transport.CloseIdleConnections()
	}
}
