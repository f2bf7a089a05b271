package memblob

import (
	"context"
	"errors"
	"net"
	"net/http"
	"testing"
)

// TestUnsendableIsNetHTTPs checks unsendable against net/http itself, byte
// by byte, in a header's name and in its value: a transport whose dial
// fails tells which requests it would have sent (it dials) and which it
// refused first, with which error.
func TestUnsendableIsNetHTTPs(t *testing.T) {
	errDial := errors.New("dialed")
	tr := &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) { return nil, errDial }}
	defer tr.CloseIdleConnections()
	for b := 0; b < 256; b++ {
		for _, h := range []http.Header{
			{"X-Ms-Meta-K" + string(rune(b)): {"v"}},
			{"x-ms-meta-" + string([]byte{'k', byte(b)}): {"v"}},
			{"X-Ms-Meta-K": {"a" + string([]byte{byte(b)}) + "b"}},
		} {
			req, err := http.NewRequest(http.MethodPut, "http://127.0.0.1:1/a/c/b", nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = h
			_, sent := tr.RoundTrip(req)
			want := ""
			if !errors.Is(sent, errDial) {
				want = sent.Error()
			}
			got := ""
			if err := unsendable(req); err != nil {
				got = err.Error()
			}
			if got != want {
				t.Errorf("header %q: unsendable says %q, net/http %q", h, got, want)
			}
		}
	}
}
