package memblob

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

func init() { contractCases = append(contractCases, metadataCases...) }

// refusedValues are metadata values that an SDK client sends but storage
// refuses: the SDK signs them as they are, while the server reads them as
// HTTP delivers them (spaces and tabs at either end trimmed, bytes above
// 0x7f read as Latin-1), so the signature does not match.
var refusedValues = []string{" lead", "trail ", "\ttab", "tab\t", " ", "caf\u00e9", "\u00a0", "\U0001F600"}

// acceptedValues are values next to those that storage keeps as sent.
var acceptedValues = []string{"a b", "a  b", "a\tb", "", `~!@#$%^&*()"'<>&;=,`}

// unsendable are metadata that the client's transport refuses to send: a
// control character (a newline above all) in a value, or a name that is not
// an HTTP token.
var unsendableMetadata = []struct{ name, value, err string }{
	{"k", "a\nb", `net/http: invalid header field value for "x-ms-meta-k"`},
	{"k", "a\r", `net/http: invalid header field value for "x-ms-meta-k"`},
	{"k", "nul\x00", `net/http: invalid header field value for "x-ms-meta-k"`},
	{"k", "del\x7f", `net/http: invalid header field value for "x-ms-meta-k"`},
	{"caf\u00e9", "v", "net/http: invalid header field name \"x-ms-meta-caf\u00e9\""},
	{"a b", "v", `net/http: invalid header field name "x-ms-meta-a b"`},
}

// wantUnsent checks that err is the transport's refusal to send, as
// http.Client returns it: a *url.Error of op whose cause says why.
func wantUnsent(t *testing.T, err error, op, why string) {
	t.Helper()
	var ue *url.Error
	var re *azcore.ResponseError
	switch {
	case errors.As(err, &re):
		t.Errorf("got an answer %d %s, want the request refused before it is sent (%s)", re.StatusCode, re.ErrorCode, why)
	case !errors.As(err, &ue):
		t.Errorf("got %v, want a *url.Error (%s)", err, why)
	case ue.Op != op || ue.Err == nil || ue.Err.Error() != why:
		t.Errorf("got %s %v, want %s %s", ue.Op, ue.Err, op, why)
	}
}

// metadataCases are the metadata storage refuses, on every request that
// sets it: Put Blob, Set Blob Metadata and Create Container.
var metadataCases = []contractCase{
	{name: "metadata-value-refused", run: func(t *testing.T, e *env) {
		e.put(t, "b", map[string]string{"k": "before"})
		before := e.props(t, "b")
		for i, v := range refusedValues {
			md := meta(map[string]string{"k": v})
			_, err := e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{Metadata: md})
			wantErr(t, err, 403, "AuthorizationFailure")
			_, err = e.blob("b").SetMetadata(e.ctx, md, nil)
			wantErr(t, err, 403, "AuthorizationFailure")
			_, err = e.blob("new").Upload(e.ctx, body("y"), &blockblob.UploadOptions{Metadata: md})
			wantErr(t, err, 403, "AuthorizationFailure")
			_, err = e.container(t, "-v"+strconv.Itoa(i)).Create(e.ctx, &container.CreateOptions{Metadata: md})
			wantErr(t, err, 403, "AuthorizationFailure")
		}
		// Beside metadata that would pass, it fails the request whole.
		_, err := e.blob("b").SetMetadata(e.ctx, meta(map[string]string{"good": "v", "bad": "x "}), nil)
		wantErr(t, err, 403, "AuthorizationFailure")
		// Nothing was written.
		after := e.props(t, "b")
		equal(t, "ETag kept", *after.ETag, *before.ETag)
		equalMaps(t, "metadata kept", flat(after.Metadata), map[string]string{"K": "before"})
		_, err = e.blob("new").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "BlobNotFound")
		_, err = e.container(t, "-v0").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
		// What is checked first: a container's name, then this, then
		// the container, the blob and the metadata names.
		_, err = e.container(t, "--bad").NewBlobClient("b").SetMetadata(e.ctx, meta(map[string]string{"k": "x "}), nil)
		wantErr(t, err, 400, "InvalidResourceName")
		_, err = e.container(t, "-none").NewBlobClient("b").SetMetadata(e.ctx, meta(map[string]string{"k": "x "}), nil)
		wantErr(t, err, 403, "AuthorizationFailure")
		_, err = e.blob("none").SetMetadata(e.ctx, meta(map[string]string{"k": "x "}), nil)
		wantErr(t, err, 403, "AuthorizationFailure")
		_, err = e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{Metadata: meta(map[string]string{"1st": "x "})})
		wantErr(t, err, 403, "AuthorizationFailure")
		// Values beside those are kept as sent, and listed so.
		for i, v := range acceptedValues {
			name := fmt.Sprintf("ok%d", i)
			e.put(t, name, map[string]string{"k": v})
			equalMaps(t, "accepted "+strconv.Quote(v), flat(e.props(t, name).Metadata), map[string]string{"K": v})
			_, err = e.blob(name).SetMetadata(e.ctx, meta(map[string]string{"k": v, "again": v}), nil)
			noErr(t, err, "set metadata "+strconv.Quote(v))
			_, err = e.container(t, "-ok"+strconv.Itoa(i)).Create(e.ctx, &container.CreateOptions{Metadata: meta(map[string]string{"k": v})})
			noErr(t, err, "create a container with "+strconv.Quote(v))
		}
		listAll(t, e, &container.ListBlobsFlatOptions{Include: withMetadata})
	}},
	{name: "metadata-name-twice", run: func(t *testing.T, e *env) {
		// Names are case-insensitive: two that differ only in case are
		// one header sent twice. Azure documents 400 for it; Azurite's
		// signature check refuses it first.
		e.put(t, "b", nil)
		md := meta(map[string]string{"name": "1", "NAME": "2"})
		_, err := e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{Metadata: md})
		wantErr(t, err, 403, "AuthorizationFailure")
		_, err = e.blob("b").SetMetadata(e.ctx, md, nil)
		wantErr(t, err, 403, "AuthorizationFailure")
		_, err = e.container(t, "-twice").Create(e.ctx, &container.CreateOptions{Metadata: md})
		wantErr(t, err, 403, "AuthorizationFailure")
		equal(t, "no metadata written", len(e.props(t, "b").Metadata), 0)
	}},
	{name: "metadata-unsendable", run: func(t *testing.T, e *env) {
		e.put(t, "b", map[string]string{"k": "before"})
		before := e.props(t, "b")
		for i, u := range unsendableMetadata {
			md := meta(map[string]string{u.name: u.value})
			_, err := e.blob("b").Upload(e.ctx, body("y"), &blockblob.UploadOptions{Metadata: md})
			wantUnsent(t, err, "Put", u.err)
			_, err = e.blob("b").SetMetadata(e.ctx, md, nil)
			wantUnsent(t, err, "Put", u.err)
			_, err = e.container(t, "-u"+strconv.Itoa(i)).Create(e.ctx, &container.CreateOptions{Metadata: md})
			wantUnsent(t, err, "Put", u.err)
		}
		after := e.props(t, "b")
		equal(t, "ETag kept", *after.ETag, *before.ETag)
		equalMaps(t, "metadata kept", flat(after.Metadata), map[string]string{"K": "before"})
		_, err := e.container(t, "-u0").GetProperties(e.ctx, nil)
		wantErr(t, err, 404, "ContainerNotFound")
	}},
}
